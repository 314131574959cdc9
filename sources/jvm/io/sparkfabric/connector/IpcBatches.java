package io.sparkfabric.connector;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.channels.ReadableByteChannel;
import org.apache.arrow.flatbuf.MessageHeader;
import org.apache.arrow.memory.ArrowBuf;
import org.apache.arrow.memory.BufferAllocator;
import org.apache.arrow.vector.VectorLoader;
import org.apache.arrow.vector.VectorSchemaRoot;
import org.apache.arrow.vector.ipc.ReadChannel;
import org.apache.arrow.vector.ipc.message.ArrowRecordBatch;
import org.apache.arrow.vector.ipc.message.MessageMetadataResult;
import org.apache.arrow.vector.ipc.message.MessageSerializer;

/** The record batches of an Arrow IPC stream held whole in one buffer (a fetch's payload, its capacity the stream's
 *  length), loaded one at a time into one VectorSchemaRoot as ArrowStreamReader loads them, but with the columns'
 *  buffers sliced from the payload instead of copied out of it. Closing it frees the root and the payload (once no
 *  vector holds a slice). */
final class IpcBatches implements AutoCloseable {
    private final ArrowBuf payload;
    private final VectorSchemaRoot root;
    private final VectorLoader loader;
    private long position;  // where the next message starts

    /** Takes `payload` (closed with this, or now if the stream's schema cannot be read). */
    IpcBatches(ArrowBuf payload, BufferAllocator allocator) throws IOException {
        this.payload = payload;
        try {
            MessageMetadataResult schema = next();
            if (schema == null || schema.headerType() != MessageHeader.Schema) {
                throw new IOException("a fetch answer's payload does not start with an Arrow schema message");
            }
            root = VectorSchemaRoot.create(MessageSerializer.deserializeSchema(schema), allocator);
        } catch (IOException | RuntimeException e) {
            payload.close();
            throw e;
        }
        loader = new VectorLoader(root);
    }

    VectorSchemaRoot getVectorSchemaRoot() {
        return root;
    }

    /** Load the next record batch into the root; false at the end of the stream. */
    boolean loadNextBatch() throws IOException {
        MessageMetadataResult message = next();
        if (message == null) {
            return false;
        }
        if (message.headerType() != MessageHeader.RecordBatch) {
            throw new IOException("a fetch answer's payload holds an Arrow message of type " + message.headerType()
                                  + " where a record batch was expected");
        }
        long length = message.getMessageBodyLength();
        if (length < 0 || length > payload.capacity() - position) {
            throw new IOException("a fetch answer's payload is cut short within a record batch");
        }
        ArrowBuf body = payload.slice(position, length);
        body.getReferenceManager().retain();  // the reference deserializeRecordBatch releases once it sliced the body
        position += length;
        try (ArrowRecordBatch batch = MessageSerializer.deserializeRecordBatch(message, body)) {
            loader.load(batch);
        }
        return true;
    }

    /** The metadata of the message at `position`, which moves past it (to its body); null at the stream's end. */
    private MessageMetadataResult next() throws IOException {
        if (position >= payload.capacity()) {
            return null;
        }
        ByteBuffer rest = payload.nioBuffer(position, (int) (payload.capacity() - position));
        try (ReadChannel channel = new ReadChannel(new BufferChannel(rest))) {
            MessageMetadataResult message = MessageSerializer.readMessage(channel);
            position += channel.bytesRead();
            return message;
        }
    }

    @Override
    public void close() {
        root.close();
        payload.close();
    }

    /** A channel reading a ByteBuffer from its position. */
    private record BufferChannel(ByteBuffer buffer) implements ReadableByteChannel {
        @Override
        public int read(ByteBuffer into) {
            if (!buffer.hasRemaining()) {
                return -1;
            }
            int n = Math.min(into.remaining(), buffer.remaining());
            into.put(buffer.slice(buffer.position(), n));
            buffer.position(buffer.position() + n);
            return n;
        }

        @Override
        public boolean isOpen() {
            return true;
        }

        @Override
        public void close() {
        }
    }
}
