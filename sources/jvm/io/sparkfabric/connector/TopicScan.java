package io.sparkfabric.connector;

import java.util.List;
import org.apache.spark.sql.connector.read.Batch;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.vectorized.ColumnarBatch;

/** A batch read of the topic: planned on the driver (Planner), read by each task in columns (PartitionBatches). */
final class TopicScan implements ScanBuilder, Scan, Batch {
    private final ReadOptions options;

    TopicScan(ReadOptions options) {
        this.options = options;
    }

    @Override
    public Scan build() {
        return this;
    }

    @Override
    public StructType readSchema() {
        return FabricJvmSource.SCHEMA;
    }

    @Override
    public String description() {
        return "fabric JVM reader: topic " + options.topic() + " (" + options.starting() + " to " + options.ending()
               + ")";
    }

    @Override
    public Batch toBatch() {
        return this;
    }

    @Override
    public InputPartition[] planInputPartitions() {
        try {
            List<FabricInputPartition> tasks = new Planner(options.url()).plan(options.topic(), options.starting(),
                                                                              options.ending());
            return tasks.toArray(new InputPartition[0]);
        } catch (RuntimeException e) {
            throw e;
        } catch (Exception e) {
            throw new IllegalStateException("cannot plan the read of topic " + options.topic() + ": "
                                            + e.getMessage(), e);
        }
    }

    @Override
    public PartitionReaderFactory createReaderFactory() {
        return new Readers();
    }

    /** Columnar readers only: Spark takes the batches as they come. */
    private static final class Readers implements PartitionReaderFactory {
        private static final long serialVersionUID = 1L;

        @Override
        public boolean supportColumnarReads(InputPartition partition) {
            return true;
        }

        @Override
        public PartitionReader<ColumnarBatch> createColumnarReader(InputPartition partition) {
            return new PartitionBatches((FabricInputPartition) partition);
        }

        @Override
        public PartitionReader<InternalRow> createReader(InputPartition partition) {
            throw new UnsupportedOperationException("the fabric JVM reader reads columns");
        }
    }
}
