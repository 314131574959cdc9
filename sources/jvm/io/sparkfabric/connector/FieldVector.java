package io.sparkfabric.connector;

import org.apache.spark.sql.types.Decimal;
import org.apache.spark.sql.vectorized.ColumnVector;
import org.apache.spark.sql.vectorized.ColumnarArray;
import org.apache.spark.sql.vectorized.ColumnarMap;
import org.apache.spark.unsafe.types.UTF8String;

/** One field of a typed topic's value struct as a column of its own: the field's values, null wherever the field or
 *  the whole value is (a tombstone's fields are null, whatever its child vectors hold there). */
final class FieldVector extends ColumnVector {
    private final ColumnVector value;  // the struct
    private final ColumnVector field;  // its child
    private final int rows;

    FieldVector(ColumnVector value, ColumnVector field, int rows) {
        super(field.dataType());
        this.value = value;
        this.field = field;
        this.rows = rows;
    }

    @Override
    public boolean isNullAt(int rowId) {
        return value.isNullAt(rowId) || field.isNullAt(rowId);
    }

    @Override
    public boolean hasNull() {
        return value.hasNull() || field.hasNull();
    }

    @Override
    public int numNulls() {
        if (!value.hasNull()) {
            return field.numNulls();
        }
        int nulls = 0;
        for (int row = 0; row < rows; row++) {
            nulls += isNullAt(row) ? 1 : 0;
        }
        return nulls;
    }

    @Override
    public void close() {
    }

    @Override
    public boolean getBoolean(int rowId) {
        return field.getBoolean(rowId);
    }

    @Override
    public byte getByte(int rowId) {
        return field.getByte(rowId);
    }

    @Override
    public short getShort(int rowId) {
        return field.getShort(rowId);
    }

    @Override
    public int getInt(int rowId) {
        return field.getInt(rowId);
    }

    @Override
    public long getLong(int rowId) {
        return field.getLong(rowId);
    }

    @Override
    public float getFloat(int rowId) {
        return field.getFloat(rowId);
    }

    @Override
    public double getDouble(int rowId) {
        return field.getDouble(rowId);
    }

    @Override
    public ColumnarArray getArray(int rowId) {
        return field.getArray(rowId);
    }

    @Override
    public ColumnarMap getMap(int ordinal) {
        return field.getMap(ordinal);
    }

    @Override
    public Decimal getDecimal(int rowId, int precision, int scale) {
        return field.getDecimal(rowId, precision, scale);
    }

    @Override
    public UTF8String getUTF8String(int rowId) {
        return field.getUTF8String(rowId);
    }

    @Override
    public byte[] getBinary(int rowId) {
        return field.getBinary(rowId);
    }

    @Override
    public ColumnVector getChild(int ordinal) {
        return field.getChild(ordinal);
    }
}
