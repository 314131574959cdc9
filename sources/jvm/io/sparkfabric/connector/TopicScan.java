package io.sparkfabric.connector;

import java.util.List;
import java.util.Map;
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

/** A read of the subscribed topics, batch or micro-batch (TopicStream): planned on the driver (Planner), read by
 *  each task in columns (PartitionBatches). */
final class TopicScan implements ScanBuilder, SupportsPushDownRequiredColumns, Scan, Batch {
    private final ReadOptions options;
    private final StructType table;  // the table's columns: all of the read's, or those a user schema picked
    private Layout layout;
    private StructType required;  // the columns the query reads (null: the table's)

    TopicScan(ReadOptions options, StructType table) {
        this.options = options;
        this.table = table;
    }

    private Layout layout() {
        if (layout == null) {
            layout = Planner.layout(options).picked(table);
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
        return "fabric JVM reader: " + options.subscription().describe();
    }

    @Override
    public Batch toBatch() {
        options.checkBatch();
        return this;
    }

    @Override
    public InputPartition[] planInputPartitions() {
        List<FabricInputPartition> tasks = Planner.unchecked("plan the read of " + options.subscription().describe(),
                                                             this::plan);
        return tasks.toArray(new InputPartition[0]);
    }

    /** The tasks from the starting to the ending offsets, the end of each partition at or after its start. */
    private List<FabricInputPartition> plan() throws Exception {
        try (Planner planner = new Planner(options.url())) {
            return plan(planner);
        }
    }

    private List<FabricInputPartition> plan(Planner planner) throws Exception {
        Planner.Snapshot now = planner.snapshot(options.subscription());
        Map<TopicPartition, Long> from = Positions.resolve(options.starting(false), now, planner, options,
                                                           "startingOffsets");
        Map<TopicPartition, Long> until = Positions.resolve(options.endingOrLatest(), now, planner, options,
                                                            "endingOffsets");
        for (Planner.PartitionAt at : now.partitions()) {
            long begin = Ranges.checkedStart(at, from.get(at.tp()), options.failOnDataLoss());
            if (until.get(at.tp()) < begin) {
                throw new IllegalArgumentException(at.tp() + ": the starting offset " + begin + " is after the ending "
                    + "offset " + until.get(at.tp()) + "; fix startingOffsets/endingOffsets (or their timestamps)");
            }
            from.put(at.tp(), begin);
        }
        return Ranges.tasks(now, from, until, layout(), options);
    }

    @Override
    public MicroBatchStream toMicroBatchStream(String checkpointLocation) {
        options.checkStream();
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
