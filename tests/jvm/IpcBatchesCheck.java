// Checks the JVM reader's IpcBatches (the record batches of a fetch's payload, sliced from it) without a server: a
// stream of three batches written by Arrow's own writer reads back whole, and a payload cut short within a batch, or
// one that is no Arrow stream, is refused with an IOException; in each case nothing stays allocated once closed.
// Prints one line per case; exits non-zero at the first that fails.
// Usage: java io.sparkfabric.connector.IpcBatchesCheck
package io.sparkfabric.connector;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.nio.channels.Channels;
import java.util.ArrayList;
import java.util.List;
import org.apache.arrow.memory.ArrowBuf;
import org.apache.arrow.memory.BufferAllocator;
import org.apache.arrow.memory.RootAllocator;
import org.apache.arrow.vector.BigIntVector;
import org.apache.arrow.vector.VarBinaryVector;
import org.apache.arrow.vector.VectorSchemaRoot;
import org.apache.arrow.vector.ipc.ArrowStreamWriter;

public final class IpcBatchesCheck {
    private static final int[] ROWS = {3, 0, 1000};

    private static byte[] stream(BufferAllocator allocator) throws IOException {
        ByteArrayOutputStream out = new ByteArrayOutputStream();
        try (VarBinaryVector values = new VarBinaryVector("value", allocator);
             BigIntVector numbers = new BigIntVector("n", allocator);
             VectorSchemaRoot root = VectorSchemaRoot.of(values, numbers);
             ArrowStreamWriter writer = new ArrowStreamWriter(root, null, Channels.newChannel(out))) {
            writer.start();
            int n = 0;
            for (int rows : ROWS) {
                values.allocateNew(rows);
                numbers.allocateNew(rows);
                for (int i = 0; i < rows; i++, n++) {
                    values.setSafe(i, ("v" + n).getBytes());
                    numbers.setSafe(i, n);
                }
                root.setRowCount(rows);
                writer.writeBatch();
            }
            writer.end();
        }
        return out.toByteArray();
    }

    /** The first `length` bytes as a payload is received (ProtocolClient): a slice of an allocation, which may be
     *  larger, that is the bytes exactly. */
    private static ArrowBuf payload(BufferAllocator allocator, byte[] bytes, int length) {
        ArrowBuf buf = allocator.buffer(length);
        buf.setBytes(0, bytes, 0, length);
        return buf.slice(0, length);
    }

    private static void check(boolean holds, String what) {
        if (!holds) {
            throw new AssertionError(what);
        }
    }

    public static void main(String[] argv) throws Exception {
        try (BufferAllocator allocator = new RootAllocator()) {
            byte[] bytes = stream(allocator);
            List<String> read = new ArrayList<>();
            int batches = 0;
            try (IpcBatches reader = new IpcBatches(payload(allocator, bytes, bytes.length), allocator)) {
                while (reader.loadNextBatch()) {
                    VectorSchemaRoot root = reader.getVectorSchemaRoot();
                    check(root.getRowCount() == ROWS[batches], "batch " + batches + " has " + root.getRowCount());
                    for (int i = 0; i < root.getRowCount(); i++) {
                        String value = new String(((VarBinaryVector) root.getVector("value")).get(i));
                        check(value.equals("v" + ((BigIntVector) root.getVector("n")).get(i)), "row " + value);
                        read.add(value);
                    }
                    batches++;
                }
            }
            check(batches == ROWS.length && read.size() == 1003 && read.get(1002).equals("v1002"), "read " + read.size());
            check(allocator.getAllocatedMemory() == 0, "whole: memory left allocated");
            System.out.println("whole: " + batches + " batches, " + read.size() + " rows");

            try (IpcBatches reader = new IpcBatches(payload(allocator, bytes, bytes.length - 100), allocator)) {
                check(reader.loadNextBatch() && reader.loadNextBatch(), "the batches before the cut");
                reader.loadNextBatch();
                throw new AssertionError("a payload cut short was read");
            } catch (IOException e) {
                System.out.println("cut short: " + e.getMessage());
            }
            check(allocator.getAllocatedMemory() == 0, "cut short: memory left allocated");

            byte[] junk = "not an arrow stream at all".getBytes();
            try (IpcBatches reader = new IpcBatches(payload(allocator, junk, junk.length), allocator)) {
                throw new AssertionError("junk was read as a stream");
            } catch (IOException e) {
                System.out.println("junk: " + e.getMessage());
            }
            check(allocator.getAllocatedMemory() == 0, "junk: memory left allocated");
        }
    }
}
