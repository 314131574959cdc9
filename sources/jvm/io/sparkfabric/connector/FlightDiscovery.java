package io.sparkfabric.connector;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import io.netty.bootstrap.Bootstrap;
import io.netty.buffer.ByteBuf;
import io.netty.buffer.Unpooled;
import io.netty.channel.Channel;
import io.netty.channel.ChannelHandlerContext;
import io.netty.channel.ChannelInitializer;
import io.netty.channel.EventLoopGroup;
import io.netty.channel.MultiThreadIoEventLoopGroup;
import io.netty.channel.SimpleChannelInboundHandler;
import io.netty.channel.nio.NioIoHandler;
import io.netty.channel.socket.SocketChannel;
import io.netty.channel.socket.nio.NioSocketChannel;
import io.netty.handler.codec.http2.DefaultHttp2DataFrame;
import io.netty.handler.codec.http2.DefaultHttp2Headers;
import io.netty.handler.codec.http2.DefaultHttp2HeadersFrame;
import io.netty.handler.codec.http2.Http2DataFrame;
import io.netty.handler.codec.http2.Http2FrameCodecBuilder;
import io.netty.handler.codec.http2.Http2Headers;
import io.netty.handler.codec.http2.Http2HeadersFrame;
import io.netty.handler.codec.http2.Http2MultiplexHandler;
import io.netty.handler.codec.http2.Http2StreamChannel;
import io.netty.handler.codec.http2.Http2StreamChannelBootstrap;
import io.netty.handler.codec.http2.Http2StreamFrame;
import io.netty.handler.ssl.SslContext;
import io.netty.handler.ssl.SslHandler;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;

/** Finds a fabric server's protocol address from its Flight address, as a fabric:// URL names it: the one unary
 *  Flight call a JVM client makes (DoAction `status`), over Netty's HTTP/2 with the gRPC framing and the two protobuf
 *  messages written by hand, since Spark's JVM has Netty but no gRPC (docs/protocol.md, "Finding the port").
 *  Plaintext (grpc+tcp) or TLS (grpc+tls, ALPN h2). `main(host, port, token|-)` prints a plaintext one's. */
public final class FlightDiscovery {
    private static final ObjectMapper JSON = new ObjectMapper();

    /** A protobuf length-delimited field: its tag, the varint length, the bytes. */
    private static void field(ByteArrayOutputStream out, int number, byte[] bytes) {
        out.write(number << 3 | 2);
        int length = bytes.length;
        while (length >= 0x80) {
            out.write(length & 0x7f | 0x80);
            length >>>= 7;
        }
        out.write(length);
        out.write(bytes, 0, bytes.length);
    }

    /** The gRPC message of arrow.flight.protocol.Action {type = 1; body = 2}: a flag byte, a length, the proto. */
    private static byte[] action(String type, String body) {
        ByteArrayOutputStream proto = new ByteArrayOutputStream();
        field(proto, 1, type.getBytes(StandardCharsets.UTF_8));
        field(proto, 2, body.getBytes(StandardCharsets.UTF_8));
        byte[] message = proto.toByteArray();
        ByteArrayOutputStream out = new ByteArrayOutputStream();
        out.write(0);
        out.write(message.length >>> 24);
        out.write(message.length >>> 16);
        out.write(message.length >>> 8);
        out.write(message.length);
        out.write(message, 0, message.length);
        return out.toByteArray();
    }

    /** The body of the first arrow.flight.protocol.Result {body = 1} in a gRPC response's data. */
    private static byte[] firstResult(byte[] data) throws IOException {
        if (data.length < 5 || data[0] != 0) {
            throw new IOException("the server answered no uncompressed gRPC message (" + data.length + " bytes)");
        }
        int at = 5;
        if ((data[at++] & 0xff) != (1 << 3 | 2)) {
            throw new IOException("the gRPC message is no Flight Result");
        }
        int length = 0;
        for (int shift = 0; ; shift += 7) {
            int b = data[at++] & 0xff;
            length |= (b & 0x7f) << shift;
            if (b < 0x80) {
                break;
            }
        }
        byte[] body = new byte[length];
        System.arraycopy(data, at, body, 0, length);
        return body;
    }

    /** Collects one stream's data and ends with its trailers. */
    private static final class Response extends SimpleChannelInboundHandler<Http2StreamFrame> {
        final ByteArrayOutputStream data = new ByteArrayOutputStream();
        final CompletableFuture<Http2Headers> trailers = new CompletableFuture<>();

        @Override
        protected void channelRead0(ChannelHandlerContext ctx, Http2StreamFrame frame) {
            if (frame instanceof Http2DataFrame) {
                ByteBuf content = ((Http2DataFrame) frame).content();
                byte[] bytes = new byte[content.readableBytes()];
                content.readBytes(bytes);
                data.write(bytes, 0, bytes.length);
                if (((Http2DataFrame) frame).isEndStream()) {
                    trailers.complete(new DefaultHttp2Headers());
                }
            } else if (frame instanceof Http2HeadersFrame && ((Http2HeadersFrame) frame).isEndStream()) {
                trailers.complete(((Http2HeadersFrame) frame).headers());
            }
        }

        @Override
        public void exceptionCaught(ChannelHandlerContext ctx, Throwable cause) {
            trailers.completeExceptionally(cause);
        }
    }

    /** `protocol_address` of a status answer in the fabric's tagged JSON: a coordinator's InstanceStatus
     *  {"$": "InstanceStatus", "v": {...}}, or a node's dict {"$": "dict", "v": [[key, value], ...]}. */
    private static String protocolAddress(JsonNode answer) throws IOException {
        JsonNode body = answer.path("v");
        if (body.isObject() && body.has("protocol_address")) {
            return body.get("protocol_address").asText();
        }
        for (JsonNode pair : body) {
            if (pair.isArray() && "protocol_address".equals(pair.path(0).asText())) {
                return pair.path(1).asText();
            }
        }
        throw new IOException("the server's status names no protocol_address (an older server): " + answer);
    }

    public static void main(String[] argv) throws Exception {
        System.out.println(protocolAddress(argv[0], Integer.parseInt(argv[1]), argv[2].equals("-") ? null : argv[2],
                                           60_000));
    }

    /** The protocol address (host:port) of the server whose plaintext Flight port is `host`:`port`. */
    public static String protocolAddress(String host, int port, String token, int timeoutMs) throws Exception {
        return protocolAddress(host, port, token, null, timeoutMs);
    }

    /** The same over TLS with `tls` (Tls.http2; null: plaintext). */
    static String protocolAddress(String host, int port, String token, SslContext tls, int timeoutMs)
            throws Exception {
        EventLoopGroup group = new MultiThreadIoEventLoopGroup(1, NioIoHandler.newFactory());
        try {
            Channel channel = new Bootstrap().group(group).channel(NioSocketChannel.class)
                .handler(new ChannelInitializer<SocketChannel>() {
                    @Override
                    protected void initChannel(SocketChannel ch) {
                        if (tls != null) {
                            ch.pipeline().addLast(tls.newHandler(ch.alloc(), host, port));
                        }
                        ch.pipeline().addLast(Http2FrameCodecBuilder.forClient().build(),
                                              new Http2MultiplexHandler(new SimpleChannelInboundHandler<Object>() {
                                                  @Override
                                                  protected void channelRead0(ChannelHandlerContext ctx, Object msg) {
                                                  }
                                              }));
                    }
                }).connect(host, port).sync().channel();
            if (tls != null) {
                io.netty.util.concurrent.Future<Channel> handshake = channel.pipeline().get(SslHandler.class)
                    .handshakeFuture();
                if (!handshake.await(timeoutMs) || !handshake.isSuccess()) {
                    throw Tls.failed("the Flight port at " + host + ":" + port, handshake.cause());
                }
            }
            Response response = new Response();
            Http2StreamChannel stream = new Http2StreamChannelBootstrap(channel).handler(response).open().sync()
                .getNow();
            Http2Headers headers = new DefaultHttp2Headers().method("POST").scheme(tls == null ? "http" : "https")
                .path("/arrow.flight.protocol.FlightService/DoAction").authority(host + ":" + port)
                .set("content-type", "application/grpc").set("te", "trailers");
            if (token != null) {
                headers.set("authorization", "Bearer " + token);
            }
            stream.write(new DefaultHttp2HeadersFrame(headers));
            stream.writeAndFlush(new DefaultHttp2DataFrame(
                Unpooled.wrappedBuffer(action("status", "{\"$\":\"dict\",\"v\":[]}")), true));
            Http2Headers trailers = response.trailers.get(timeoutMs, TimeUnit.MILLISECONDS);
            CharSequence status = trailers.get("grpc-status");
            if (status != null && !"0".contentEquals(status)) {
                throw new IOException("the server refused the status call: gRPC status " + status + ", "
                                      + trailers.get("grpc-message"));
            }
            channel.close().sync();
            return protocolAddress(JSON.readTree(firstResult(response.data.toByteArray())));
        } finally {
            group.shutdownGracefully(0, 1, TimeUnit.SECONDS).sync();
        }
    }
}
