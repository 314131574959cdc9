package io.sparkfabric.connector;

import java.util.Map;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.connector.catalog.SupportsWrite;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableProvider;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.execution.datasources.v2.python.PythonDataSourceV2;
import org.apache.spark.sql.sources.DataSourceRegister;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/** `format("fabric")` where the JVM reader's jar is on Spark's class path (Spark takes a JVM source before a
 *  Python one of the same name): reads of a fabric:// or fabric+tls:// cluster by the JVM reader (FabricJvmSource);
 *  every other read (file://) and every write (the exactly-once sink) by the Python data source of the same
 *  name (pyspark_fabric), which Spark's data source manager still finds by its name. Without the jar, or with conf
 *  spark.fabric.jvmReader=false, format("fabric") is that Python source alone. */
public final class FabricSource implements TableProvider, DataSourceRegister {
    static final String CONF = "spark.fabric.jvmReader";
    private final PythonDataSourceV2 python = new PythonDataSourceV2();

    public FabricSource() {
        python.setShortName("fabric");
    }

    @Override
    public String shortName() {
        return "fabric";
    }

    /** Whether a read with `options` is the JVM reader's: its URL (ReadOptions.url's order) names a cluster, unless
     *  the session's conf spark.fabric.jvmReader is false (the Python source for every read). */
    private static boolean jvm(Map<String, String> options) {
        boolean wanted = !SparkSession.getActiveSession().isDefined()
            || !"false".equalsIgnoreCase(SparkSession.getActiveSession().get().conf().get(CONF, "true").strip());
        return wanted && FabricUrl.cluster(ReadOptions.url(new CaseInsensitiveStringMap(options)));
    }

    @Override
    public StructType inferSchema(CaseInsensitiveStringMap options) {
        return jvm(options) ? FabricJvmSource.schemaOf(options) : python.inferSchema(options);
    }

    @Override
    public boolean supportsExternalMetadata() {
        return true;  // a user schema (.schema("value binary")) picks columns, as the Python source's does
    }

    @Override
    public Table getTable(StructType schema, Transform[] partitioning, Map<String, String> properties) {
        Table table = python.getTable(schema, partitioning, properties);
        return jvm(properties) ? new FabricJvmSource.Topic(schema, (SupportsWrite) table) : table;
    }
}
