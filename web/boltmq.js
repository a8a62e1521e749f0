// BoltMQ's browser client: RocketMQ's remoting protocol over a browser WebSocket.
//
// No dependencies. One binary WebSocket message carries exactly one whole frame (its 4-byte
// length field included); headers are JSON. Ask a registry over ws:// and the route names the
// brokers' ws:// addresses, which this module then dials.
//
//   import { BoltMQClient } from "./boltmq.js";
//   const client = new BoltMQClient("ws://127.0.0.1:9877/");
//   const sent = await client.send("Orders", "hello", { tags: "created", keys: ["o-1"] });
//   const pulled = await client.pull("Orders", sent.brokerName, sent.queueId, sent.queueOffset);
//   await client.commitOffset("my-group", "Orders", sent.brokerName, sent.queueId, pulled.nextBeginOffset);
//
// Reconnects: a connection that closed is opened again by the next call to that address, after a
// backoff of 0.1 s doubling to 5 s while attempts fail; calls in flight when it closed fail with
// the close code and reason. See docs/remoting.md for the limits.

export const RequestCode = Object.freeze({
  PULL_MESSAGE: 11,
  QUERY_CONSUMER_OFFSET: 14,
  UPDATE_CONSUMER_OFFSET: 15,
  GET_MAX_OFFSET: 30,
  GET_ROUTEINFO_BY_TOPIC: 105,
  SEND_MESSAGE_V2: 310,
});

export const ResponseCode = Object.freeze({
  SUCCESS: 0,
  SYSTEM_ERROR: 1,
  REQUEST_CODE_NOT_SUPPORTED: 3,
  FLUSH_DISK_TIMEOUT: 10,
  SLAVE_NOT_AVAILABLE: 11,
  FLUSH_SLAVE_TIMEOUT: 12,
  TOPIC_NOT_EXIST: 17,
  PULL_NOT_FOUND: 19,
  PULL_RETRY_IMMEDIATELY: 20,
  PULL_OFFSET_MOVED: 21,
  QUERY_NOT_FOUND: 22,
});

const SEND_STATUS = {
  0: "SEND_OK",
  10: "FLUSH_DISK_TIMEOUT",
  11: "SLAVE_NOT_AVAILABLE",
  12: "FLUSH_SLAVE_TIMEOUT",
};
const PULL_STATUS = { 0: "FOUND", 19: "NO_NEW_MSG", 20: "NO_MATCHED_MSG", 21: "OFFSET_ILLEGAL" };

/** The default frame limit, as the servers' (16 MiB). */
export const DEFAULT_FRAME_LIMIT = 16 * 1024 * 1024;
const RESPONSE_FLAG = 0x1;
const ONEWAY_FLAG = 0x2;
const PULL_SUSPEND = 0x2;
const PULL_SUBSCRIPTION = 0x4;
const SYSFLAG_COMPRESSED = 0x1;
const SYSFLAG_BORNHOST_V6 = 0x10;
const SYSFLAG_STOREHOST_V6 = 0x20;
const NAME_VALUE = "\u0001";
const PROPERTY_SEP = "\u0002";

const utf8 = new TextEncoder();
const utf8Decoder = new TextDecoder();

/** An error with the remoting response code attached (when the peer answered). */
export class RemotingError extends Error {
  constructor(message, code = null) {
    super(message);
    this.name = "RemotingError";
    this.code = code;
  }
}

// -------------------------------------------------------------------------------- frames

let nextOpaque = 1;

/** A request command: {code, opaque, flag, extFields, body}. */
export function request(code, extFields = {}, body = null) {
  const fields = {};
  for (const [key, value] of Object.entries(extFields)) {
    // The servers read extFields as strings (Java's HashMap<String, String>).
    if (value !== undefined && value !== null) fields[key] = String(value);
  }
  return { code, language: "OTHER", version: 0, opaque: nextOpaque++, flag: 0, extFields: fields, body };
}

/** One whole frame (length field included) with a JSON header, as an ArrayBuffer. */
export function encodeFrame(command) {
  const header = { code: command.code, language: command.language || "OTHER",
    version: command.version || 0, opaque: command.opaque, flag: command.flag || 0 };
  if (command.remark != null) header.remark = command.remark;
  if (command.extFields) header.extFields = command.extFields;
  const headerBytes = utf8.encode(JSON.stringify(header));
  const body = command.body == null ? new Uint8Array(0)
    : typeof command.body === "string" ? utf8.encode(command.body) : new Uint8Array(command.body);
  const frame = new Uint8Array(8 + headerBytes.length + body.length);
  const view = new DataView(frame.buffer);
  view.setInt32(0, 4 + headerBytes.length + body.length);
  view.setUint32(4, headerBytes.length); // serialize type 0 (JSON) in the high byte
  frame.set(headerBytes, 8);
  frame.set(body, 8 + headerBytes.length);
  return frame.buffer;
}

/** Decode one whole frame (an ArrayBuffer) into {code, opaque, flag, remark, extFields, body}. */
export function decodeFrame(buffer) {
  if (buffer.byteLength < 8) throw new RemotingError(`frame of ${buffer.byteLength} bytes is too short`);
  const view = new DataView(buffer);
  const length = view.getInt32(0);
  if (length !== buffer.byteLength - 4) {
    throw new RemotingError(`frame length field says ${length} but ${buffer.byteLength - 4} bytes follow`);
  }
  const word = view.getUint32(4);
  const serializeType = word >>> 24;
  const headerLength = word & 0xffffff;
  if (serializeType !== 0) throw new RemotingError(`header serialize type ${serializeType} is not JSON`);
  if (8 + headerLength > buffer.byteLength) throw new RemotingError("header runs past the frame");
  const header = JSON.parse(utf8Decoder.decode(new Uint8Array(buffer, 8, headerLength)));
  const body = new Uint8Array(buffer, 8 + headerLength);
  return { ...header, extFields: header.extFields || {}, body: body.length ? body : null };
}

// -------------------------------------------------------------------------------- messages

/** ``name\u0001value`` pairs joined by ``\u0002``. */
export function propertiesToString(properties) {
  return Object.entries(properties)
    .filter(([k, v]) => k && v !== undefined && v !== null && v !== "")
    .map(([k, v]) => `${k}${NAME_VALUE}${v}`)
    .join(PROPERTY_SEP);
}

/** The inverse of propertiesToString. */
export function stringToProperties(text) {
  const properties = {};
  for (const piece of text.split(PROPERTY_SEP)) {
    const at = piece.indexOf(NAME_VALUE);
    if (at > 0) properties[piece.slice(0, at)] = piece.slice(at + 1);
  }
  return properties;
}

function hex(bytes) {
  return Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("").toUpperCase();
}

/** A client message id (UNIQ_KEY): 32 hex characters, random and time-ordered enough. */
export function createUniqId() {
  const bytes = new Uint8Array(16);
  crypto.getRandomValues(bytes);
  new DataView(bytes.buffer).setUint32(10, Date.now() % 0x100000000);
  return hex(bytes);
}

async function inflate(bytes) {
  // Bodies the Java and Python producers compress are zlib-wrapped ("deflate" here).
  const stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("deflate"));
  return new Uint8Array(await new Response(stream).arrayBuffer());
}

/**
 * Decode the stored message records of a pull answer's body (RocketMQ's commit-log format).
 * Each message: {topic, body (Uint8Array), text (body as UTF-8), tags, keys, properties, msgId,
 * offsetMsgId, queueId, queueOffset, storeTimestamp, bornTimestamp, reconsumeTimes, sysFlag}.
 */
export async function decodeMessages(bytes) {
  const data = bytes instanceof Uint8Array ? bytes : new Uint8Array(bytes);
  const view = new DataView(data.buffer, data.byteOffset, data.byteLength);
  const messages = [];
  let pos = 0;
  while (pos + 8 <= data.length) {
    const size = view.getInt32(pos);
    if (size <= 0 || pos + size > data.length) throw new RemotingError(`message record at ${pos} is cut short`);
    const sysFlag = view.getInt32(pos + 36);
    const bornLength = sysFlag & SYSFLAG_BORNHOST_V6 ? 20 : 8;
    const storeLength = sysFlag & SYSFLAG_STOREHOST_V6 ? 20 : 8;
    let at = pos + 48 + bornLength;
    const storeTimestamp = Number(view.getBigInt64(at));
    at += 8;
    const storeHost = data.slice(at, at + storeLength);
    at += storeLength;
    const reconsumeTimes = view.getInt32(at);
    at += 12; // reconsume times, prepared transaction offset
    const bodyLength = view.getInt32(at);
    at += 4;
    let body = data.slice(at, at + bodyLength);
    at += bodyLength;
    const topicLength = data[at];
    const topic = utf8Decoder.decode(data.subarray(at + 1, at + 1 + topicLength));
    at += 1 + topicLength;
    const propertiesLength = view.getInt16(at);
    const properties = stringToProperties(utf8Decoder.decode(data.subarray(at + 2, at + 2 + propertiesLength)));
    if (sysFlag & SYSFLAG_COMPRESSED) body = await inflate(body);
    const physicalOffset = view.getBigInt64(pos + 28);
    const idBytes = new Uint8Array(storeLength + 8);
    idBytes.set(storeHost, 0);
    new DataView(idBytes.buffer).setBigInt64(storeLength, physicalOffset);
    const offsetMsgId = hex(idBytes);
    messages.push({
      topic,
      body,
      text: utf8Decoder.decode(body),
      tags: properties.TAGS || null,
      keys: properties.KEYS ? properties.KEYS.split(" ") : [],
      properties,
      msgId: properties.UNIQ_KEY || offsetMsgId,
      offsetMsgId,
      queueId: view.getInt32(pos + 12),
      queueOffset: Number(view.getBigInt64(pos + 20)),
      storeTimestamp,
      bornTimestamp: Number(view.getBigInt64(pos + 40)),
      reconsumeTimes,
      sysFlag,
    });
    pos += size;
  }
  return messages;
}

// -------------------------------------------------------------------------------- connection

/** One WebSocket to one address: calls matched to answers by opaque, a deadline per call. */
export class Connection {
  constructor(address, { frameLimit = DEFAULT_FRAME_LIMIT } = {}) {
    this.address = address;
    this.frameLimit = frameLimit;
    this.pending = new Map();
    this.closed = false;
    this.closeReason = null;
    this.ready = new Promise((resolve, reject) => {
      const ws = new WebSocket(address);
      ws.binaryType = "arraybuffer";
      this.ws = ws;
      ws.onopen = () => resolve(this);
      ws.onerror = () => reject(new RemotingError(`cannot open a websocket to ${address}`));
      ws.onmessage = (event) => this._receive(event.data);
      ws.onclose = (event) => this._closed(event);
    });
  }

  _receive(data) {
    if (typeof data === "string") return this.close("a text message cannot carry a frame");
    if (data.byteLength > this.frameLimit + 8) return this.close(`frame of ${data.byteLength} bytes is over the limit`);
    let command;
    try {
      command = decodeFrame(data);
    } catch (error) {
      return this.close(`bad frame: ${error.message}`);
    }
    if (command.flag & RESPONSE_FLAG) {
      const call = this.pending.get(command.opaque);
      if (call) {
        this.pending.delete(command.opaque);
        clearTimeout(call.timer);
        call.resolve(command);
      }
    } else if (!(command.flag & ONEWAY_FLAG)) {
      // A broker calling a client (NOTIFY_CONSUMER_IDS_CHANGED is oneway); nothing else is served.
      this.ws.send(encodeFrame({ code: ResponseCode.REQUEST_CODE_NOT_SUPPORTED, opaque: command.opaque,
        flag: RESPONSE_FLAG, remark: ` request type ${command.code} not supported`, extFields: {} }));
    }
  }

  _closed(event) {
    this.closed = true;
    const reason = this.closeReason
      || `the server closed the websocket (code ${event.code}${event.reason ? ", " + event.reason : ""})`;
    this.closeReason = reason;
    for (const call of this.pending.values()) {
      clearTimeout(call.timer);
      call.reject(new RemotingError(`connection to ${this.address} closed: ${reason}`));
    }
    this.pending.clear();
  }

  /** Send a request and wait for its answer, at most timeoutMs. */
  invoke(command, timeoutMs = 3000) {
    if (this.closed) return Promise.reject(new RemotingError(`connection to ${this.address} is closed`));
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.pending.delete(command.opaque);
        reject(new RemotingError(`no response to request ${command.code} from ${this.address} within ${timeoutMs} ms`));
      }, timeoutMs);
      this.pending.set(command.opaque, { resolve, reject, timer });
      this.ws.send(encodeFrame(command));
    });
  }

  close(reason = "closed by the client") {
    if (!this.closeReason) this.closeReason = reason;
    this.ws.close(1000);
  }
}

// -------------------------------------------------------------------------------- client

/**
 * A client of one cluster, reached through its registries' websocket addresses.
 * namesrvAddr: "ws://host:port/" (or several, ';'-separated).
 */
export class BoltMQClient {
  constructor(namesrvAddr, { timeoutMs = 3000, producerGroup = "BROWSER_PRODUCER", frameLimit = DEFAULT_FRAME_LIMIT } = {}) {
    this.registries = String(namesrvAddr).split(";").map((a) => a.trim()).filter(Boolean);
    for (const address of this.registries) {
      if (!/^wss?:\/\/[^/]+:\d+/.test(address)) {
        throw new RemotingError(`registry address ${address} is not ws://host:port/ (or wss://)`);
      }
    }
    if (!this.registries.length) throw new RemotingError("namesrvAddr names no registry: give ws://host:port/");
    this.timeoutMs = timeoutMs;
    this.producerGroup = producerGroup;
    this.frameLimit = frameLimit;
    this.connections = new Map();
    this.failures = new Map(); // address -> {count, notBefore}
    this.routes = new Map();
    this.registryIndex = 0;
    this.sendIndex = 0;
  }

  /** The open connection to address, opened again after a close (with backoff after failures). */
  async connection(address) {
    const existing = this.connections.get(address);
    if (existing && !existing.closed) return existing.ready;
    const failure = this.failures.get(address);
    if (failure && Date.now() < failure.notBefore) {
      throw new RemotingError(`cannot connect to ${address}: ${failure.count} attempt(s) failed; next in ${failure.notBefore - Date.now()} ms`);
    }
    const conn = new Connection(address, { frameLimit: this.frameLimit });
    this.connections.set(address, conn);
    try {
      await conn.ready;
    } catch (error) {
      const count = (failure ? failure.count : 0) + 1;
      this.failures.set(address, { count, notBefore: Date.now() + Math.min(5000, 100 * 2 ** (count - 1)) });
      this.connections.delete(address);
      throw error;
    }
    this.failures.delete(address);
    return conn;
  }

  async invoke(address, command, timeoutMs = this.timeoutMs) {
    const conn = await this.connection(address);
    return conn.invoke(command, timeoutMs);
  }

  /** The topic's route ({brokerDatas, queueDatas}) from a registry; throws when unknown. */
  async getRoute(topic) {
    const errors = [];
    for (let step = 0; step < this.registries.length; step++) {
      const address = this.registries[(this.registryIndex + step) % this.registries.length];
      let answer;
      try {
        answer = await this.invoke(address, request(RequestCode.GET_ROUTEINFO_BY_TOPIC, { topic }));
      } catch (error) {
        errors.push(`${address}: ${error.message}`);
        continue;
      }
      this.registryIndex = (this.registryIndex + step + 1) % this.registries.length;
      if (answer.code !== ResponseCode.SUCCESS) {
        throw new RemotingError(`route of ${topic}: ${answer.remark || "code " + answer.code}`, answer.code);
      }
      const route = JSON.parse(utf8Decoder.decode(answer.body));
      this.routes.set(topic, route);
      return route;
    }
    throw new RemotingError(`no registry answered: ${errors.join("; ")}`);
  }

  /** The master (broker id 0) address of brokerName in topic's route. */
  async brokerAddress(topic, brokerName) {
    let route = this.routes.get(topic) || (await this.getRoute(topic));
    let data = route.brokerDatas.find((b) => b.brokerName === brokerName);
    if (!data) {
      route = await this.getRoute(topic);
      data = route.brokerDatas.find((b) => b.brokerName === brokerName);
    }
    const address = data && data.brokerAddrs["0"];
    if (!address) throw new RemotingError(`broker ${brokerName} of ${topic} has no master reachable over websocket`);
    return address;
  }

  /** Writable queues of the topic: [{brokerName, queueId}], sorted. */
  async publishQueues(topic) {
    const route = this.routes.get(topic) || (await this.getRoute(topic));
    const masters = new Set(route.brokerDatas.filter((b) => b.brokerAddrs["0"]).map((b) => b.brokerName));
    const queues = [];
    for (const q of [...route.queueDatas].sort((a, b) => a.brokerName.localeCompare(b.brokerName))) {
      if (!(q.perm & 2) || !masters.has(q.brokerName)) continue;
      for (let i = 0; i < q.writeQueueNums; i++) queues.push({ brokerName: q.brokerName, queueId: i });
    }
    return queues;
  }

  /** Readable queues of the topic: [{brokerName, queueId}], sorted. */
  async subscribeQueues(topic) {
    const route = await this.getRoute(topic);
    const queues = [];
    for (const q of route.queueDatas) {
      if (!(q.perm & 4)) continue;
      for (let i = 0; i < q.readQueueNums; i++) queues.push({ brokerName: q.brokerName, queueId: i });
    }
    return queues.sort((a, b) => a.brokerName.localeCompare(b.brokerName) || a.queueId - b.queueId);
  }

  /**
   * Send one message (SEND_MESSAGE_V2). body: string or bytes; options: tags, keys (string or
   * array), properties (object), queue ({brokerName, queueId}; round robin when absent),
   * producerGroup. Returns {status, brokerName, brokerAddr, queueId, queueOffset, msgId, offsetMsgId}.
   */
  async send(topic, body, { tags, keys, properties = {}, queue, producerGroup } = {}) {
    if (!topic) throw new RemotingError("send needs a topic");
    let target = queue;
    let routeTopic = topic;
    if (!target) {
      let queues;
      try {
        queues = await this.publishQueues(topic);
      } catch (error) {
        if (error.code !== ResponseCode.TOPIC_NOT_EXIST) throw error;
        queues = []; // a new topic: the broker creates it from TBW102 on first send
      }
      if (!queues.length) {
        const fallback = await this.publishQueues("TBW102");
        routeTopic = "TBW102";
        queues = fallback.map((q) => ({ ...q, queueId: q.queueId % 4 })).filter((q, i, all) =>
          all.findIndex((o) => o.brokerName === q.brokerName && o.queueId === q.queueId) === i);
        if (!queues.length) throw new RemotingError(`no broker takes messages for ${topic}`);
      }
      target = queues[this.sendIndex++ % queues.length];
    }
    const props = { ...properties, UNIQ_KEY: createUniqId(), WAIT: "true" };
    if (tags) props.TAGS = tags;
    if (keys && keys.length) props.KEYS = Array.isArray(keys) ? keys.join(" ") : keys;
    const fields = {
      a: producerGroup || this.producerGroup, b: topic, c: "TBW102", d: 4, e: target.queueId,
      f: 0, g: Date.now(), h: 0, i: propertiesToString(props), j: 0, k: false,
    };
    const address = await this.brokerAddress(routeTopic, target.brokerName);
    const answer = await this.invoke(address, request(RequestCode.SEND_MESSAGE_V2, fields, body));
    const status = SEND_STATUS[answer.code];
    if (!status) throw new RemotingError(`send to ${target.brokerName}: ${answer.remark || "code " + answer.code}`, answer.code);
    this.routes.delete(topic); // the first send of a new topic creates queues: learn them next time
    return {
      status,
      brokerName: target.brokerName,
      brokerAddr: address,
      queueId: Number(answer.extFields.queueId),
      queueOffset: Number(answer.extFields.queueOffset),
      msgId: props.UNIQ_KEY,
      offsetMsgId: answer.extFields.msgId,
    };
  }

  /**
   * Pull from a queue at offset, held by the broker up to suspendMs when nothing is there (long
   * polling). Returns {status (FOUND, NO_NEW_MSG, NO_MATCHED_MSG, OFFSET_ILLEGAL),
   * nextBeginOffset, minOffset, maxOffset, messages}.
   */
  async pull(topic, brokerName, queueId, offset, { group = "BROWSER_CONSUMER", maxMsgNums = 32, suspendMs = 15000, subscription = "*" } = {}) {
    const address = await this.brokerAddress(topic, brokerName);
    const fields = {
      consumerGroup: group, topic, queueId, queueOffset: offset, maxMsgNums,
      sysFlag: PULL_SUBSCRIPTION | (suspendMs > 0 ? PULL_SUSPEND : 0), commitOffset: 0,
      suspendTimeoutMillis: suspendMs, subscription, subVersion: Date.now(), expressionType: "TAG",
    };
    const answer = await this.invoke(address, request(RequestCode.PULL_MESSAGE, fields), suspendMs + this.timeoutMs);
    const status = PULL_STATUS[answer.code];
    if (!status) throw new RemotingError(`pull of ${topic}@${brokerName}:${queueId}: ${answer.remark || "code " + answer.code}`, answer.code);
    const ext = answer.extFields;
    return {
      status,
      nextBeginOffset: Number(ext.nextBeginOffset),
      minOffset: Number(ext.minOffset),
      maxOffset: Number(ext.maxOffset),
      messages: status === "FOUND" && answer.body ? await decodeMessages(answer.body) : [],
    };
  }

  /** The queue's max offset (where the next message will be stored). */
  async maxOffset(topic, brokerName, queueId) {
    const address = await this.brokerAddress(topic, brokerName);
    const answer = await this.invoke(address, request(RequestCode.GET_MAX_OFFSET, { topic, queueId }));
    if (answer.code !== ResponseCode.SUCCESS) throw new RemotingError(`max offset: ${answer.remark}`, answer.code);
    return Number(answer.extFields.offset);
  }

  /** The group's committed offset of a queue, or -1 when it has none. */
  async committedOffset(group, topic, brokerName, queueId) {
    const address = await this.brokerAddress(topic, brokerName);
    const answer = await this.invoke(address, request(RequestCode.QUERY_CONSUMER_OFFSET, { consumerGroup: group, topic, queueId }));
    if (answer.code === ResponseCode.QUERY_NOT_FOUND) return -1;
    if (answer.code !== ResponseCode.SUCCESS) throw new RemotingError(`committed offset: ${answer.remark}`, answer.code);
    return Number(answer.extFields.offset);
  }

  /** Commit the group's offset of a queue (UPDATE_CONSUMER_OFFSET). */
  async commitOffset(group, topic, brokerName, queueId, offset) {
    const address = await this.brokerAddress(topic, brokerName);
    const answer = await this.invoke(address, request(RequestCode.UPDATE_CONSUMER_OFFSET,
      { consumerGroup: group, topic, queueId, commitOffset: offset }));
    if (answer.code !== ResponseCode.SUCCESS) throw new RemotingError(`commit offset: ${answer.remark}`, answer.code);
  }

  /** Close every connection. */
  close() {
    for (const conn of this.connections.values()) conn.close();
    this.connections.clear();
  }
}
