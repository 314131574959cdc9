package io.sparkfabric.connector;

import java.io.IOException;
import java.io.Serializable;
import java.io.UncheckedIOException;
import java.net.URLDecoder;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

/** A fabric:// or fabric+tls:// URL as the Python client reads it (fabric.server.connection): the coordinator
 *  instances' Flight addresses, the token (`?token=`, else $FABRIC_TOKEN) and TLS (fabric+tls://, or `?tls=true`),
 *  its CA (`?ca=`, else $FABRIC_TLS_CA; none: the JVM's default roots). The token and the CA's certificates are
 *  read where the URL is parsed, on the driver, and travel with the plan: executors need neither. */
final class FabricUrl implements Serializable {
    private static final long serialVersionUID = 2L;

    final List<String> addresses;
    final String token;
    final boolean tls;
    final String caPem;  // the CA file's PEM text (null: the default roots)

    private FabricUrl(List<String> addresses, String token, boolean tls, String caPem) {
        this.addresses = addresses;
        this.token = token;
        this.tls = tls;
        this.caPem = caPem;
    }

    /** Whether `url` names a cluster (fabric:// or fabric+tls://), what the JVM reader reads. */
    static boolean cluster(String url) {
        return url != null && (url.startsWith("fabric://") || url.startsWith("fabric+tls://"));
    }

    static FabricUrl parse(String url) {
        if (!cluster(url)) {
            throw new IllegalArgumentException("option url must be a fabric:// or fabric+tls:// URL (the JVM reader "
                + "reads clusters; file:// is read by format(\"fabric\")'s Python source), got " + url);
        }
        String rest = url.substring(url.indexOf("://") + 3);
        Map<String, String> query = new HashMap<>();
        int mark = rest.indexOf('?');
        if (mark >= 0) {
            for (String pair : rest.substring(mark + 1).split("&")) {
                int eq = pair.indexOf('=');
                if (eq > 0) {
                    query.put(pair.substring(0, eq), URLDecoder.decode(pair.substring(eq + 1), StandardCharsets.UTF_8));
                }
            }
            rest = rest.substring(0, mark);
        }
        List<String> addresses = new ArrayList<>();
        for (String address : rest.replaceAll("/+$", "").split(",")) {
            if (!address.matches(".+:\\d+")) {
                throw new IllegalArgumentException("option url names " + address + ", not host:port: give the "
                    + "coordinator's Flight address, e.g. fabric://localhost:9092");
            }
            addresses.add(address);
        }
        String token = query.getOrDefault("token", System.getenv("FABRIC_TOKEN"));
        boolean tls = url.startsWith("fabric+tls://")
            || List.of("true", "1", "yes").contains(query.getOrDefault("tls", "false").toLowerCase());
        String ca = query.getOrDefault("ca", System.getenv("FABRIC_TLS_CA"));
        return new FabricUrl(List.copyOf(addresses), token == null || token.isEmpty() ? null : token, tls,
                             tls && ca != null && !ca.isEmpty() ? pem(ca) : null);
    }

    private static String pem(String file) {
        try {
            return Files.readString(Path.of(file));
        } catch (IOException e) {
            throw new UncheckedIOException("cannot read the TLS CA file " + file + " (?ca= or $FABRIC_TLS_CA): "
                                           + e.getMessage(), e);
        }
    }
}
