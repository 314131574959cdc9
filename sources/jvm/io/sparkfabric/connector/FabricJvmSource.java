package io.sparkfabric.connector;

import java.util.EnumSet;
import java.util.Map;
import java.util.Set;
import org.apache.spark.sql.connector.catalog.SupportsRead;
import org.apache.spark.sql.connector.catalog.SupportsWrite;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.catalog.TableProvider;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.connector.write.LogicalWriteInfo;
import org.apache.spark.sql.connector.write.WriteBuilder;
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
        return schemaOf(options);
    }

    /** The columns of a read with `options`. */
    static StructType schemaOf(CaseInsensitiveStringMap options) {
        return Planner.layout(ReadOptions.of(options)).schema();
    }

    @Override
    public boolean supportsExternalMetadata() {
        return true;  // a user schema (.schema("value binary")) picks columns, as format("fabric")'s does
    }

    @Override
    public Table getTable(StructType schema, Transform[] partitioning, Map<String, String> properties) {
        return new Topic(schema, null);
    }

    /** The subscribed topics as Spark's table: read here, written by `writes` (FabricSource: the Python sink's
     *  table; null: not written). */
    static final class Topic implements SupportsRead, SupportsWrite {
        private final StructType schema;
        private final SupportsWrite writes;

        Topic(StructType schema, SupportsWrite writes) {
            this.schema = schema;
            this.writes = writes;
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
            Set<TableCapability> out = EnumSet.of(TableCapability.BATCH_READ, TableCapability.MICRO_BATCH_READ);
            if (writes != null) {
                writes.capabilities().stream().filter(c -> c != TableCapability.BATCH_READ
                                                           && c != TableCapability.MICRO_BATCH_READ).forEach(out::add);
            }
            return out;
        }

        @Override
        public ScanBuilder newScanBuilder(CaseInsensitiveStringMap options) {
            return new TopicScan(ReadOptions.of(options), schema);
        }

        @Override
        public WriteBuilder newWriteBuilder(LogicalWriteInfo info) {
            if (writes == null) {
                throw new UnsupportedOperationException("format(\"fabric-jvm\") only reads; write with "
                                                        + "format(\"fabric\")");
            }
            return writes.newWriteBuilder(info);
        }
    }
}
