package io.sparkfabric.connector;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.BufferedInputStream;
import java.io.BufferedOutputStream;
import java.io.Closeable;
import java.io.DataInputStream;
import java.io.DataOutputStream;
import java.io.EOFException;
import java.io.IOException;
import java.net.InetSocketAddress;
import java.net.Socket;
import org.apache.arrow.memory.ArrowBuf;
import org.apache.arrow.memory.BufferAllocator;

/** One connection to a fabric server's protocol port (docs/protocol.md): length-prefixed frames of a JSON header
 *  and an Arrow IPC payload, each answer read in the order the requests were sent. The `hello` that opens it
 *  carries the token. */
public final class ProtocolClient implements Closeable {
    static final ObjectMapper JSON = new ObjectMapper();
    private static final int MAX_HEADER = 2 << 20;

    /** A request's answer: its result and payload (an Arrow IPC stream for fetch, else empty). */
    public record Answer(JsonNode result, byte[] payload) { }

    private final String address;
    private final Socket socket;
    private final DataInputStream in;
    private final DataOutputStream out;
    private long nextId = 1;
    private final byte[] chunk = new byte[1 << 16];  // a fetch's payload passes through it on its way off-heap

    private ProtocolClient(String address, boolean tls, String caPem, int timeoutMs) throws IOException {
        this.address = address;
        int colon = address.lastIndexOf(':');
        String host = address.substring(0, colon);
        int port = Integer.parseInt(address.substring(colon + 1));
        Socket plain = new Socket();
        plain.connect(new InetSocketAddress(host, port), timeoutMs);
        plain.setTcpNoDelay(true);
        plain.setSoTimeout(timeoutMs);
        try {
            socket = tls ? Tls.wrap(plain, host, port, caPem) : plain;
        } catch (IOException e) {
            plain.close();
            throw Tls.failed("the fabric protocol port at " + address, e);
        }
        in = new DataInputStream(new BufferedInputStream(socket.getInputStream(), 1 << 16));
        out = new DataOutputStream(new BufferedOutputStream(socket.getOutputStream(), 1 << 16));
    }

    /** A plaintext connection to `address` (host:port), said hello to with `token` (null: none). */
    public static ProtocolClient connect(String address, String token, int timeoutMs) throws IOException {
        return connect(address, token, false, null, timeoutMs);
    }

    /** A connection to `address` of the cluster of `url`: its token, and TLS if it asks for it. */
    static ProtocolClient connect(String address, FabricUrl url, int timeoutMs) throws IOException {
        return connect(address, url.token, url.tls, url.caPem, timeoutMs);
    }

    private static ProtocolClient connect(String address, String token, boolean tls, String caPem, int timeoutMs)
            throws IOException {
        ProtocolClient client = new ProtocolClient(address, tls, caPem, timeoutMs);
        try {
            ObjectNode hello = JSON.createObjectNode();
            hello.put("protocol", "fabric");
            hello.put("version", 1);
            hello.put("token", token);
            hello.put("client", "java");
            client.call("hello", hello);
            return client;
        } catch (IOException | RuntimeException e) {
            client.close();
            throw e;
        }
    }

    public static ObjectNode args() {
        return JSON.createObjectNode();
    }

    /** Send one request and read its answer; its refusal as a FabricException naming the server's error. */
    public Answer call(String type, ObjectNode args) throws IOException {
        return receive(send(type, args));
    }

    /** Send one request without waiting for its answer; its id, for `receive` (a task's next fetch, sent while it
     *  reads the last one's batches: PartitionFetches). Only one request is ever waited for at a time. */
    long send(String type, ObjectNode args) throws IOException {
        long id = nextId++;
        ObjectNode header = JSON.createObjectNode();
        header.put("id", id);
        header.put("type", type);
        header.set("args", args);
        byte[] bytes = JSON.writeValueAsBytes(header);
        out.writeInt(4 + bytes.length);
        out.writeInt(bytes.length);
        out.write(bytes);
        out.flush();
        return id;
    }

    /** The answer of request `id`, the one sent last (see `call`). */
    Answer receive(long id) throws IOException {
        Head head = head();
        byte[] payload = new byte[(int) head.payloadLength()];
        in.readFully(payload);
        return new Answer(result(head, id), payload);
    }

    /** A fetch's answer: its result, and its payload (an Arrow IPC stream) in memory of the caller's allocator,
     *  read into it from the socket with no copy on the Java heap; closing it frees the payload. */
    record Fetched(JsonNode result, ArrowBuf payload) implements AutoCloseable {
        @Override
        public void close() {
            payload.close();
        }
    }

    /** The answer of request `id` (see `receive`), its payload read into memory of `allocator`. */
    Fetched receive(long id, BufferAllocator allocator) throws IOException {
        Head head = head();
        ArrowBuf payload = allocator.buffer(head.payloadLength());
        try {
            for (long done = 0; done < head.payloadLength(); ) {
                int got = in.read(chunk, 0, (int) Math.min(chunk.length, head.payloadLength() - done));
                if (got < 0) {
                    throw new EOFException("the fabric protocol port at " + address + " closed the connection "
                                           + "within an answer");
                }
                payload.setBytes(done, chunk, 0, got);
                done += got;
            }
            // (an allocation may be larger than asked: the slice is the payload's bytes exactly, and frees it)
            return new Fetched(result(head, id), payload.slice(0, head.payloadLength()));
        } catch (IOException | RuntimeException e) {
            payload.close();
            throw e;
        }
    }

    /** An answer's header, and the length of the payload that follows it. */
    private record Head(JsonNode answer, long payloadLength) { }

    /** Read an answer's frame up to its payload. */
    private Head head() throws IOException {
        long length = in.readInt() & 0xffffffffL;
        long headerLength = in.readInt() & 0xffffffffL;
        if (headerLength > MAX_HEADER || headerLength > length - 4) {
            throw new IOException("the fabric protocol port at " + address + " sent a frame that is no answer");
        }
        byte[] bytes = new byte[(int) headerLength];
        in.readFully(bytes);
        return new Head(JSON.readTree(bytes), length - 4 - headerLength);
    }

    /** The answer's result (request `id`'s); its refusal as a FabricException naming the server's error. */
    private JsonNode result(Head head, long id) throws IOException {
        JsonNode answer = head.answer();
        JsonNode error = answer.get("error");
        if (error != null && !error.isNull()) {
            throw new FabricException(error.path("type").asText(), error.path("message").asText(),
                                      error.path("active").isTextual() ? error.path("active").asText() : null);
        }
        if (answer.path("id").asLong() != id) {
            throw new IOException("the fabric protocol port at " + address + " answered request "
                                  + answer.path("id") + ", expected " + id);
        }
        return answer.get("result");
    }

    @Override
    public void close() throws IOException {
        socket.close();
    }
}
