// Fetches a partition range over the fabric protocol (docs/protocol.md) with what Spark's JVM ships: JDK sockets,
// Jackson for the JSON headers and Arrow's IPC stream reader for the payloads. Prints one line per record,
// "offset<TAB>key hex<TAB>value hex" ("-" for a null), for the test to compare with the Python consumer.
// Usage: java FabricFetch HOST PORT TOKEN|- TOPIC PARTITION FROM_OFFSET END_OFFSET
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.ByteArrayInputStream;
import java.io.DataInputStream;
import java.io.DataOutputStream;
import java.io.IOException;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import org.apache.arrow.memory.BufferAllocator;
import org.apache.arrow.memory.RootAllocator;
import org.apache.arrow.vector.VarBinaryVector;
import org.apache.arrow.vector.VectorSchemaRoot;
import org.apache.arrow.vector.ipc.ArrowStreamReader;

public final class FabricFetch {
    private static final ObjectMapper JSON = new ObjectMapper();

    private final DataInputStream in;
    private final DataOutputStream out;
    private long nextId = 1;

    private FabricFetch(Socket socket) throws IOException {
        socket.setTcpNoDelay(true);
        this.in = new DataInputStream(socket.getInputStream());
        this.out = new DataOutputStream(socket.getOutputStream());
    }

    /** Sends one request frame: u32 length, u32 header length, the JSON header (no payload). */
    private long send(String type, ObjectNode args) throws IOException {
        ObjectNode header = JSON.createObjectNode();
        long id = nextId++;
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

    /** One answer frame: its header (which must answer `id` without an error) and payload. */
    private Object[] receive(long id) throws IOException {
        int length = in.readInt();
        int headerLength = in.readInt();
        byte[] header = new byte[headerLength];
        in.readFully(header);
        byte[] payload = new byte[length - 4 - headerLength];
        in.readFully(payload);
        JsonNode answer = JSON.readTree(header);
        if (answer.has("error") && !answer.get("error").isNull()) {
            JsonNode error = answer.get("error");
            throw new IOException(error.get("type").asText() + ": " + error.get("message").asText());
        }
        if (answer.get("id").asLong() != id) {
            throw new IOException("answer to request " + answer.get("id") + ", expected " + id);
        }
        return new Object[] {answer.get("result"), payload};
    }

    private static String hex(VarBinaryVector vector, int row) {
        if (vector.isNull(row)) {
            return "-";
        }
        StringBuilder text = new StringBuilder();
        for (byte b : vector.get(row)) {
            text.append(String.format("%02x", b));
        }
        return text.toString();
    }

    public static void main(String[] argv) throws Exception {
        String token = argv[2].equals("-") ? null : argv[2];
        String topic = argv[3];
        int partition = Integer.parseInt(argv[4]);
        long offset = Long.parseLong(argv[5]);
        long end = Long.parseLong(argv[6]);
        try (Socket socket = new Socket(argv[0], Integer.parseInt(argv[1]));
             BufferAllocator allocator = new RootAllocator()) {
            FabricFetch client = new FabricFetch(socket);
            ObjectNode hello = JSON.createObjectNode();
            hello.put("protocol", "fabric");
            hello.put("version", 1);
            hello.put("token", token);
            hello.put("client", "java");
            client.receive(client.send("hello", hello));
            StringBuilder lines = new StringBuilder();
            while (offset < end) {
                ObjectNode fetch = JSON.createObjectNode();
                fetch.put("topic", topic);
                fetch.put("partition", partition);
                fetch.put("offset", offset);
                fetch.put("max_bytes", 1 << 20);
                fetch.put("end_offset", end);
                Object[] answer = client.receive(client.send("fetch", fetch));
                JsonNode runs = (JsonNode) answer[0];
                if (runs.size() == 0) {
                    throw new IOException("no records at offset " + offset + " below " + end);
                }
                try (ArrowStreamReader reader = new ArrowStreamReader(
                        new ByteArrayInputStream((byte[]) answer[1]), allocator)) {
                    VectorSchemaRoot root = reader.getVectorSchemaRoot();
                    for (JsonNode run : runs) {
                        reader.loadNextBatch();
                        long base = run.get("offset").asLong();
                        VarBinaryVector keys = (VarBinaryVector) root.getVector("key");
                        VarBinaryVector values = (VarBinaryVector) root.getVector("value");
                        for (int row = 0; row < root.getRowCount() && base + row < end; row++) {
                            lines.append(base + row).append('\t').append(hex(keys, row)).append('\t')
                                 .append(hex(values, row)).append('\n');
                        }
                        offset = Math.max(offset, base + root.getRowCount());
                    }
                }
            }
            System.out.write(lines.toString().getBytes(StandardCharsets.UTF_8));
            System.out.flush();
        }
    }
}
