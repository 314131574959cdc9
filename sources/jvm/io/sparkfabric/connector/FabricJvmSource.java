package io.sparkfabric.connector;

import java.util.EnumSet;
import java.util.Map;
import java.util.Set;
import org.apache.spark.sql.connector.catalog.SupportsRead;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.catalog.TableProvider;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.sources.DataSourceRegister;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/** `format("fabric-jvm")`: batch and micro-batch reads of topics of a fabric:// cluster in Spark's JVM, columnar,
 *  each task placed by the hosts of its partition's in-sync replicas; the options and columns of format("fabric")
 *  (ReadOptions, Layout). */
public final class FabricJvmSource implements TableProvider, DataSourceRegister {

    @Override
    public String shortName() {
        return "fabric-jvm";
    }

    @Override
    public StructType inferSchema(CaseInsensitiveStringMap options) {
        return Planner.layout(ReadOptions.of(options)).schema();
    }

    @Override
    public Table getTable(StructType schema, Transform[] partitioning, Map<String, String> properties) {
        return new Topic(schema);
    }

    /** The subscribed topics as Spark's table. */
    private static final class Topic implements SupportsRead {
        private final StructType schema;

        Topic(StructType schema) {
            this.schema = schema;
        }

        @Override
        public String name() {
            return "fabric";
        }

        @Override
        @SuppressWarnings("deprecation")  // Table.schema(): what Spark 4.3 still asks a table for
        public StructType schema() {
            return schema;
        }

        @Override
        public Set<TableCapability> capabilities() {
            return EnumSet.of(TableCapability.BATCH_READ, TableCapability.MICRO_BATCH_READ);
        }

        @Override
        public ScanBuilder newScanBuilder(CaseInsensitiveStringMap options) {
            return new TopicScan(ReadOptions.of(options));
        }
    }
}
