package io.sparkfabric.connector;

import java.io.IOException;
import java.util.Arrays;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.connector.read.streaming.PartitionOffset;
import org.apache.spark.sql.connector.read.streaming.SupportsRealTimeRead;
import org.apache.spark.sql.vectorized.ColumnarBatch;

/** A real-time task's reader (trigger(realTime=...)): its partition's records one row at a time, each handed on as
 *  soon as the fetch that waits at the log's end returns it, and where it stopped (the batch's end, mergeOffsets).
 *  Spark's real-time mode reads rows, so the fetched Arrow columns are read through ColumnarBatch's row view. */
final class RecordRows implements SupportsRealTimeRead<InternalRow> {
    /** Where a real-time task stopped: the next offset of its partition. */
    record Position(TopicPartition tp, long next) implements PartitionOffset { }

    private final FabricInputPartition task;
    private final PartitionBatches batches;
    private final int timestampColumn;  // -1: the query reads no timestamp
    private ColumnarBatch batch;
    private int row;
    private long next;

    RecordRows(FabricInputPartition task) {
        this.task = task;
        this.batches = new PartitionBatches(task);
        this.timestampColumn = Arrays.asList(task.layout().schema().fieldNames()).indexOf("timestamp");
        this.next = task.from();
    }

    @Override
    public RecordStatus nextWithTimeout(Long timeoutMs) throws IOException {
        if (batch == null || row + 1 >= batch.numRows()) {
            batch = batches.next(Math.max(timeoutMs, 0)) ? batches.get() : null;
            row = -1;
            if (batch == null) {
                return RecordStatus.newStatusWithoutArrivalTime(false);
            }
        }
        row++;
        next = batches.base() + row + 1;
        if (timestampColumn < 0 || batch.column(timestampColumn).isNullAt(row)) {
            return RecordStatus.newStatusWithoutArrivalTime(true);
        }
        return RecordStatus.newStatusWithArrivalTimeMs(batch.column(timestampColumn).getLong(row) / 1000);
    }

    @Override
    public boolean next() throws IOException {
        return nextWithTimeout(0L).hasRecord();
    }

    @Override
    public InternalRow get() {
        return batch.getRow(row);
    }

    @Override
    public PartitionOffset getOffset() {
        return new Position(new TopicPartition(task.topic(), task.partition()), next);
    }

    @Override
    public void close() throws IOException {
        batches.close();
    }
}
