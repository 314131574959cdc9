// Fetches a partition range over the fabric protocol (docs/protocol.md) with what Spark's JVM ships (JDK sockets,
// Jackson for the JSON headers, Arrow's IPC stream reader for the payloads) through the JVM reader's protocol
// client. Prints one line per record, "offset<TAB>key hex<TAB>value hex" ("-" for a null), for the test to compare
// with the Python consumer.
// Usage: java FabricFetch HOST:PORT TOKEN|- TOPIC PARTITION FROM_OFFSET END_OFFSET
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import io.sparkfabric.connector.ProtocolClient;
import java.io.ByteArrayInputStream;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import org.apache.arrow.memory.BufferAllocator;
import org.apache.arrow.memory.RootAllocator;
import org.apache.arrow.vector.VarBinaryVector;
import org.apache.arrow.vector.VectorSchemaRoot;
import org.apache.arrow.vector.ipc.ArrowStreamReader;

public final class FabricFetch {
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
        String token = argv[1].equals("-") ? null : argv[1];
        String topic = argv[2];
        int partition = Integer.parseInt(argv[3]);
        long offset = Long.parseLong(argv[4]);
        long end = Long.parseLong(argv[5]);
        try (ProtocolClient client = ProtocolClient.connect(argv[0], token, 30_000);
             BufferAllocator allocator = new RootAllocator()) {
            StringBuilder lines = new StringBuilder();
            while (offset < end) {
                ObjectNode fetch = ProtocolClient.args();
                fetch.put("topic", topic);
                fetch.put("partition", partition);
                fetch.put("offset", offset);
                fetch.put("max_bytes", 1 << 20);
                fetch.put("end_offset", end);
                ProtocolClient.Answer answer = client.call("fetch", fetch);
                if (answer.result().size() == 0) {
                    throw new IOException("no records at offset " + offset + " below " + end);
                }
                try (ArrowStreamReader reader = new ArrowStreamReader(new ByteArrayInputStream(answer.payload()),
                                                                      allocator)) {
                    VectorSchemaRoot root = reader.getVectorSchemaRoot();
                    for (JsonNode run : answer.result()) {
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
