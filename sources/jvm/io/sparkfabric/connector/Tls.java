package io.sparkfabric.connector;

import io.netty.handler.ssl.ApplicationProtocolConfig;
import io.netty.handler.ssl.ApplicationProtocolNames;
import io.netty.handler.ssl.SslContext;
import io.netty.handler.ssl.SslContextBuilder;
import java.io.ByteArrayInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.security.GeneralSecurityException;
import java.security.KeyStore;
import java.security.cert.Certificate;
import java.security.cert.CertificateFactory;
import javax.net.ssl.SSLContext;
import javax.net.ssl.SSLParameters;
import javax.net.ssl.SSLSocket;
import javax.net.ssl.TrustManagerFactory;

/** The TLS of a fabric+tls:// URL, as the Python client's (fabric.common.protocol.connection.client_ssl): the
 *  server's certificate checked against the URL's CA certificates (FabricUrl.caPem) or the JVM's default roots,
 *  and its name against the address dialled (HTTPS endpoint identification: an IP address against its IP SANs). */
final class Tls {
    private Tls() {
    }

    /** `plain`, connected to `host`:`port`, wrapped in TLS and its handshake done. */
    static Socket wrap(Socket plain, String host, int port, String caPem) throws IOException {
        SSLSocket socket = (SSLSocket) context(caPem).getSocketFactory().createSocket(plain, host, port, true);
        SSLParameters parameters = socket.getSSLParameters();
        parameters.setEndpointIdentificationAlgorithm("HTTPS");
        socket.setSSLParameters(parameters);
        socket.startHandshake();
        return socket;
    }

    /** How TLS with `server` failed: the deepest cause's words (a handshake names only its engine), and what to
     *  check. */
    static IOException failed(String server, Throwable cause) {
        Throwable root = cause;
        while (root != null && root.getCause() != null) {
            root = root.getCause();
        }
        return new IOException("TLS with " + server + " failed: " + (root == null ? "no handshake in time"
            : root.getMessage()) + " (does ?ca= or $FABRIC_TLS_CA name the CA of the servers' certificates, and do "
            + "they hold the address dialled?)", cause);
    }

    /** Netty's client context for HTTP/2 over TLS (ALPN h2), checking the server as wrap() does. */
    static SslContext http2(String caPem) throws IOException {
        SslContextBuilder builder = SslContextBuilder.forClient().endpointIdentificationAlgorithm("HTTPS")
            .applicationProtocolConfig(new ApplicationProtocolConfig(ApplicationProtocolConfig.Protocol.ALPN,
                ApplicationProtocolConfig.SelectorFailureBehavior.NO_ADVERTISE,
                ApplicationProtocolConfig.SelectedListenerFailureBehavior.ACCEPT, ApplicationProtocolNames.HTTP_2));
        return (caPem == null ? builder : builder.trustManager(pem(caPem))).build();
    }

    private static InputStream pem(String caPem) {
        return new ByteArrayInputStream(caPem.getBytes(StandardCharsets.US_ASCII));
    }

    private static SSLContext context(String caPem) throws IOException {
        try {
            SSLContext context = SSLContext.getInstance("TLS");
            if (caPem == null) {
                context.init(null, null, null);
                return context;
            }
            KeyStore trusted = KeyStore.getInstance(KeyStore.getDefaultType());
            trusted.load(null, null);
            try (InputStream in = pem(caPem)) {
                int i = 0;
                for (Certificate certificate : CertificateFactory.getInstance("X.509").generateCertificates(in)) {
                    trusted.setCertificateEntry("ca-" + i++, certificate);
                }
            }
            TrustManagerFactory trust = TrustManagerFactory.getInstance(TrustManagerFactory.getDefaultAlgorithm());
            trust.init(trusted);
            context.init(null, trust.getTrustManagers(), null);
            return context;
        } catch (GeneralSecurityException e) {
            throw new IOException("cannot use the TLS CA certificates (?ca= or $FABRIC_TLS_CA): " + e.getMessage(), e);
        }
    }
}
