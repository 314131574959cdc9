package io.sparkfabric.connector;

import java.util.List;
import org.apache.spark.sql.connector.read.Batch;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.connector.read.SupportsPushDownRequiredColumns;
import org.apache.spark.sql.connector.read.streaming.MicroBatchStream;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.vectorized.ColumnarBatch;

/** A read of the topic, batch or micro-batch (TopicStream): planned on the driver (Planner), read by each task in
 *  columns (PartitionBatches). */
final class TopicScan implements ScanBuilder, SupportsPushDownRequiredColumns, Scan, Batch {
    private final ReadOptions options;
    private Layout layout;
    private StructType required;  // the columns the query reads (null: all)

    TopicScan(ReadOptions options) {
        this.options = options;
    }

    private Layout layout() {
        if (layout == null) {
            layout = Planner.layout(options);
        }
        return required == null ? layout : layout.pruned(required);
    }

    @Override
    public Scan build() {
        return this;
    }

    @Override
    public void pruneColumns(StructType requiredSchema) {
        required = requiredSchema;
    }

    @Override
    public StructType readSchema() {
        return layout().schema();
    }

    @Override
    public String description() {
        return "fabric JVM reader: topic " + options.topic();
    }

    @Override
    public Batch toBatch() {
        return this;
    }

    @Override
    public InputPartition[] planInputPartitions() {
        List<FabricInputPartition> tasks = Planner.unchecked("plan the read of topic " + options.topic(),
            () -> new Planner(options.url()).plan(options,
                                                  options.starting() == null ? "earliest" : options.starting(),
                                                  options.ending() == null ? "latest" : options.ending(), layout()));
        return tasks.toArray(new InputPartition[0]);
    }

    @Override
    public MicroBatchStream toMicroBatchStream(String checkpointLocation) {
        return new TopicStream(options, layout());
    }

    @Override
    public PartitionReaderFactory createReaderFactory() {
        return new Readers();
    }

    /** Columnar readers, whose batches Spark takes as they come; row readers for the open tasks of real-time
     *  mode, which reads rows. */
    static final class Readers implements PartitionReaderFactory {
        private static final long serialVersionUID = 1L;

        @Override
        public boolean supportColumnarReads(InputPartition partition) {
            return !((FabricInputPartition) partition).open();
        }

        @Override
        public PartitionReader<ColumnarBatch> createColumnarReader(InputPartition partition) {
            return new PartitionBatches((FabricInputPartition) partition);
        }

        @Override
        public PartitionReader<InternalRow> createReader(InputPartition partition) {
            return new RecordRows((FabricInputPartition) partition);
        }
    }
}
