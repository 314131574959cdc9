package io.sparkfabric.connector;

import java.io.ByteArrayInputStream;
import java.io.IOException;
import java.io.Serializable;
import java.nio.channels.Channels;
import java.util.Arrays;
import java.util.Base64;
import java.util.List;
import org.apache.arrow.vector.ipc.ReadChannel;
import org.apache.arrow.vector.ipc.message.MessageSerializer;
import org.apache.arrow.vector.types.pojo.Schema;
import org.apache.spark.sql.types.ArrayType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.ArrowUtils;

/** The columns of a read, as format("fabric") gives them: key; value, or a typed topic's value fields in its place;
 *  topic, partition, offset, timestamp, timestampType (never null); and with includeHeaders, headers. `schema` is
 *  what the query reads of them, in its order (all of them until Spark prunes the columns: `pruned`). */
record Layout(String[] valueFields, boolean headers, StructType schema) implements Serializable {
    static final ArrayType HEADERS = DataTypes.createArrayType(new StructType()
        .add("key", DataTypes.StringType).add("value", DataTypes.BinaryType));

    /** The layout of a topic whose `topic` answer names `valueSchema` (null: binary values; else the base64 of an
     *  Arrow IPC schema message). */
    static Layout of(String valueSchema, boolean headers) throws IOException {
        StructType schema = new StructType().add("key", DataTypes.BinaryType);
        String[] fields = null;
        if (valueSchema == null) {
            schema = schema.add("value", DataTypes.BinaryType);
        } else {
            Schema arrow = MessageSerializer.deserializeSchema(new ReadChannel(Channels.newChannel(
                new ByteArrayInputStream(Base64.getDecoder().decode(valueSchema)))));
            StructType values = ArrowUtils.fromArrowSchema(arrow);
            fields = values.fieldNames();
            for (StructField field : values.fields()) {
                schema = schema.add(field);
            }
        }
        schema = schema.add("topic", DataTypes.StringType, false).add("partition", DataTypes.IntegerType, false)
            .add("offset", DataTypes.LongType, false).add("timestamp", DataTypes.TimestampType, false)
            .add("timestampType", DataTypes.IntegerType, false);
        return new Layout(fields, headers, headers ? schema.add("headers", HEADERS) : schema);
    }

    /** The same columns, of which the query reads `required` only (a subset of the schema, in its order). */
    /** The columns a user schema (`.schema(...)`) picks, in its order: each must be a column of the read, of its
     *  type, as format("fabric") requires. */
    Layout picked(StructType wanted) {
        List<String> names = Arrays.asList(schema.fieldNames());
        List<String> unknown = Arrays.stream(wanted.fieldNames()).filter(n -> !names.contains(n)).toList();
        if (!unknown.isEmpty()) {
            throw new IllegalArgumentException("SchemaMismatchError: unknown column(s) " + unknown + " in the schema "
                + "given to the fabric source; available: " + names + " (give a subset of them, or no schema)");
        }
        for (StructField field : wanted.fields()) {
            StructField read = schema.fields()[names.indexOf(field.name())];
            if (!read.dataType().sameType(field.dataType())) {
                throw new IllegalArgumentException("SchemaMismatchError: the schema given to the fabric source makes "
                    + "column '" + field.name() + "' " + field.dataType().simpleString() + ", but it is "
                    + read.dataType().simpleString() + " in a read of these topics");
            }
        }
        return new Layout(valueFields, headers, wanted);
    }

    Layout pruned(StructType required) {
        return new Layout(valueFields, headers, required);
    }

    /** The position of a typed value field in the stored value struct; -1 for another column. */
    int valueField(String name) {
        if (valueFields != null) {
            for (int i = 0; i < valueFields.length; i++) {
                if (valueFields[i].equals(name)) {
                    return i;
                }
            }
        }
        return -1;
    }
}
