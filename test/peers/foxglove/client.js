// An independent client of the Foxglove WebSocket protocol for test/test_foxglove_view.py:
// the protocol's reference client (@foxglove/ws-protocol) over `ws`, decoding each message with
// protobufjs from the schema the server advertised (a FileDescriptorSet), as the Foxglove app
// does. It prints one JSON object per line on stdout:
//   {"event": "serverInfo", ...}            the server's name and capabilities
//   {"event": "advertise", "channels": [...]}  topic, encoding, schemaName, schemaEncoding
//   {"event": "message", "topic", "schemaName", "bytes", "decoded"}  (decoded: JSON of the
//                                                      protobuf message; cdr/json: see below)
//   {"event": "asset", "uri", "status", "error", "text"}
// Usage: node client.js ws://127.0.0.1:PORT SECONDS [asset-uri ...]
// Subscribes to every channel; ends after SECONDS or on the server's close.
"use strict";

const { FoxgloveClient } = require("@foxglove/ws-protocol");
const WebSocket = require("ws");
const protobuf = require("protobufjs");
const descriptor = require("protobufjs/ext/descriptor");

const [url, seconds, ...assets] = process.argv.slice(2);
// foxglove-sdk's server speaks the protocol's current subprotocol name; the reference client
// sends whatever the socket offers (its SUPPORTED_SUBPROTOCOL is the older name).
const ws = new WebSocket(url, ["foxglove.sdk.v1", FoxgloveClient.SUPPORTED_SUBPROTOCOL]);
const client = new FoxgloveClient({ ws });
const channels = new Map(); // subscription id -> channel (with its decoder)
const say = (obj) => process.stdout.write(JSON.stringify(obj) + "\n");

function decoderFor(channel) {
  if (channel.encoding === "protobuf") {
    const bytes = Buffer.from(channel.schema, "base64");
    const set = descriptor.FileDescriptorSet.decode(bytes);
    const root = protobuf.Root.fromDescriptor(set);
    const type = root.lookupType(channel.schemaName);
    return (data) => type.toObject(type.decode(data), { longs: Number, defaults: true });
  }
  if (channel.encoding === "json") {
    return (data) => JSON.parse(Buffer.from(data).toString("utf8"));
  }
  return () => null; // cdr: the test decodes the bytes itself
}

client.on("serverInfo", (info) => say({ event: "serverInfo", name: info.name,
  capabilities: info.capabilities }));
client.on("advertise", (list) => {
  say({ event: "advertise", channels: list.map((c) => ({ id: c.id, topic: c.topic,
    encoding: c.encoding, schemaName: c.schemaName, schemaEncoding: c.schemaEncoding,
    schema: c.schema })) });
  for (const c of list) {
    let decode;
    try {
      decode = decoderFor(c);
    } catch (err) {
      say({ event: "schemaError", topic: c.topic, error: String(err) });
      continue;
    }
    const id = client.subscribe(c.id);
    channels.set(id, { ...c, decode });
  }
});
client.on("message", ({ subscriptionId, data }) => {
  const c = channels.get(subscriptionId);
  if (!c) return;
  const bytes = new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
  let decoded = null;
  let error;
  try {
    decoded = c.decode(bytes);
  } catch (err) {
    error = String(err);
  }
  say({ event: "message", topic: c.topic, schemaName: c.schemaName, bytes: bytes.length,
    decoded, error, raw: c.encoding === "cdr" ? Buffer.from(bytes).toString("base64") : undefined });
});
client.on("fetchAssetResponse", (r) => {
  const text = r.status === 0 ? Buffer.from(r.data.buffer, r.data.byteOffset,
    r.data.byteLength).toString("utf8") : undefined;
  say({ event: "asset", requestId: r.requestId, status: r.status, error: r.error, text });
});
client.on("open", () => {
  assets.forEach((uri, i) => client.fetchAsset(uri, i + 1));
});
client.on("error", (err) => say({ event: "error", error: String(err) }));
client.on("close", () => process.exit(0));
setTimeout(() => { client.close(); process.exit(0); }, Number(seconds) * 1000);
