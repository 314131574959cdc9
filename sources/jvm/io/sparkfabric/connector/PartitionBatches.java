package io.sparkfabric.connector;

import com.fasterxml.jackson.databind.JsonNode;
import java.io.IOException;
import java.util.ArrayDeque;
import java.util.Deque;
import org.apache.arrow.memory.BufferAllocator;
import org.apache.arrow.memory.RootAllocator;
import org.apache.arrow.vector.ValueVector;
import org.apache.arrow.vector.VectorSchemaRoot;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.execution.vectorized.ConstantColumnVector;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.vectorized.ArrowColumnVector;
import org.apache.spark.sql.vectorized.ColumnVector;
import org.apache.spark.sql.vectorized.ColumnarBatch;
import org.apache.spark.unsafe.types.UTF8String;

/** A task's reader: fetches its offsets (PartitionFetches) and hands Spark each fetched batch's Arrow columns as
 *  they came (key, value, timestamp: slices of the fetch's payload, IpcBatches), with the offset, topic, partition
 *  and timestamp type laid beside them, no row copied. A batch is valid until the next call of next(), as Spark's
 *  columnar reads require. */
final class PartitionBatches implements PartitionReader<ColumnarBatch> {
    private final FabricInputPartition task;
    private final PartitionFetches fetches;
    private final BufferAllocator allocator = new RootAllocator();
    private final Deque<Long> runs = new ArrayDeque<>();  // the first offset of each batch of the current fetch
    private final Deque<Integer> types = new ArrayDeque<>();  // and its timestamp type
    private IpcBatches reader;
    private ColumnarBatch current;
    private long base;  // the offset of the current batch's first row

    PartitionBatches(FabricInputPartition task) {
        this.task = task;
        this.fetches = new PartitionFetches(task, allocator);
    }

    @Override
    public boolean next() throws IOException {
        return next(0);
    }

    /** Whether a next batch was read; an open task's waits up to `waitMs` at the log's end for records. */
    boolean next(long waitMs) throws IOException {
        long deadline = System.currentTimeMillis() + waitMs;
        while (true) {
            if (reader != null && !runs.isEmpty()) {
                base = runs.removeFirst();
                int timestampType = types.removeFirst();
                if (!reader.loadNextBatch()) {
                    throw new IOException("a fetch of " + task.topic() + "-" + task.partition()
                                          + " listed more batches than its payload holds");
                }
                VectorSchemaRoot root = reader.getVectorSchemaRoot();
                int rows = (int) Math.min(root.getRowCount(), task.until() - base);
                fetches.moveTo(base + Math.max(root.getRowCount(), 0));
                if (rows <= 0) {
                    continue;  // an empty batch says where to read next
                }
                current = batch(root, base, rows, timestampType);
                return true;
            }
            long left = deadline - System.currentTimeMillis();
            if (fetches.position() >= task.until() || (task.open() && left <= 0)) {
                return false;
            }
            ProtocolClient.Fetched answer = fetches.fetch(Math.max(left, 0));
            closeReader();
            if (answer.result().size() > 0) {
                reader = new IpcBatches(answer.payload(), allocator);
                for (JsonNode run : answer.result()) {
                    runs.addLast(run.path("offset").asLong());
                    types.addLast(run.path("timestamp_type").asInt());
                }
            } else {
                answer.close();
            }
        }
    }

    /** The offset of the first row of the batch get() returns. */
    long base() {
        return base;
    }

    /** The batch's columns the query reads, in its order: the stored ones as they came (a typed value's fields each
     *  a column of its own), the others laid beside them. */
    private ColumnarBatch batch(VectorSchemaRoot root, long base, int rows, int timestampType) {
        Layout layout = task.layout();
        String[] names = layout.schema().fieldNames();
        ColumnVector[] columns = new ColumnVector[names.length];
        ColumnVector value = null;
        for (int i = 0; i < names.length; i++) {
            int field = layout.valueField(names[i]);
            if (field >= 0) {
                value = value == null ? arrow(root.getVector("value")) : value;
                columns[i] = new FieldVector(value, value.getChild(field), rows);
                continue;
            }
            columns[i] = switch (names[i]) {
                case "key", "value", "timestamp", "headers" -> arrow(root.getVector(names[i]));
                case "topic" -> constant(rows, task.topic());
                case "partition" -> constantInt(rows, task.partition());
                case "offset" -> new OffsetVector(base);
                case "timestampType" -> constantInt(rows, timestampType);
                default -> throw new IllegalStateException("no column " + names[i] + " in a fabric read");
            };
        }
        return new ColumnarBatch(columns, rows);
    }

    private static ColumnVector arrow(ValueVector vector) {
        return new ArrowColumnVector(vector);
    }

    private static ColumnVector constant(int rows, String value) {
        ConstantColumnVector vector = new ConstantColumnVector(rows, DataTypes.StringType);
        vector.setUtf8String(UTF8String.fromString(value));
        return vector;
    }

    private static ColumnVector constantInt(int rows, int value) {
        ConstantColumnVector vector = new ConstantColumnVector(rows, DataTypes.IntegerType);
        vector.setInt(value);
        return vector;
    }

    @Override
    public ColumnarBatch get() {
        return current;
    }

    private void closeReader() {
        if (reader != null) {
            reader.close();
            reader = null;
        }
    }

    @Override
    public void close() throws IOException {
        closeReader();
        fetches.close();
        allocator.close();
    }
}
