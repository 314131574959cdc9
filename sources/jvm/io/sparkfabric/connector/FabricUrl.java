package io.sparkfabric.connector;

import java.io.Serializable;
import java.net.URLDecoder;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;

/** A fabric:// URL as the Python client reads it: the coordinator instances' Flight addresses, and the token
 *  (`?token=`, else $FABRIC_TOKEN). The JVM reader serves plaintext fabric:// clusters. */
final class FabricUrl implements Serializable {
    private static final long serialVersionUID = 1L;

    final List<String> addresses;
    final String token;

    private FabricUrl(List<String> addresses, String token) {
        this.addresses = addresses;
        this.token = token;
    }

    static FabricUrl parse(String url) {
        if (url == null || !url.startsWith("fabric://")) {
            throw new IllegalArgumentException("option url must be a fabric:// URL (the JVM reader reads clusters; "
                + "file:// and fabric+tls:// are read by format(\"fabric\")), got " + url);
        }
        String rest = url.substring("fabric://".length());
        String token = System.getenv("FABRIC_TOKEN");
        int query = rest.indexOf('?');
        if (query >= 0) {
            for (String pair : rest.substring(query + 1).split("&")) {
                if (pair.startsWith("token=")) {
                    token = URLDecoder.decode(pair.substring("token=".length()), StandardCharsets.UTF_8);
                }
            }
            rest = rest.substring(0, query);
        }
        List<String> addresses = new ArrayList<>();
        for (String address : rest.replaceAll("/+$", "").split(",")) {
            if (!address.matches(".+:\\d+")) {
                throw new IllegalArgumentException("option url names " + address + ", not host:port: give the "
                    + "coordinator's Flight address, e.g. fabric://localhost:9092");
            }
            addresses.add(address);
        }
        return new FabricUrl(List.copyOf(addresses), token == null || token.isEmpty() ? null : token);
    }
}
