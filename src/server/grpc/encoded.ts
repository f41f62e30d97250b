/**
 * Responses encoded once and written to many calls. A WatchDevices change goes
 * to every watcher as the same message; encoding it once per watcher cost about
 * 4 ms of CPU per change with 1,000 watchers (bench/watch.ts). A handler
 * yields `encodeOnce(codec, message)` — or shares one such value between calls —
 * and every method's response serializer, wrapped by `passEncodedResponses`
 * (GrpcServer applies it to every service it serves), sends those bytes as they
 * are. grpc-js frames a copy for each call, so sharing the bytes is safe.
 */
import { BinaryWriter } from '@bufbuild/protobuf/wire';
import type { ServiceDefinition } from '@grpc/grpc-js';

/** A response already encoded for the wire; `Res` is the message type it encodes. */
export class Encoded<Res> {
  declare private readonly res: Res;
  constructor(readonly bytes: Buffer) {}
}

/** A generated codec that writes into a given writer (ts-proto's `encode(message, writer)`). */
interface WriterCodec<T> {
  encode(message: T, writer: BinaryWriter): BinaryWriter;
}

/**
 * One writer for every `encodeOnce`: encoding is synchronous, and `finish()`
 * copies what was written out and starts again at the front, so its buffer
 * keeps the size the largest message needed. A writer of its own per message
 * starts at 128 bytes and doubles, copying, to fit each one (a whole-fleet
 * watch encodes a million).
 */
const shared = new BinaryWriter();

export function encodeOnce<T>(codec: WriterCodec<T>, message: T): Encoded<T> {
  let u8: Uint8Array;
  try {
    u8 = codec.encode(message, shared).finish();
  } catch (err) {
    shared.finish(); // What a failed encode wrote is dropped, not sent with the next message.
    throw err;
  }
  return new Encoded<T>(Buffer.from(u8.buffer, u8.byteOffset, u8.byteLength));
}

/**
 * `rest` encoded after the repeated message field number `field` made of
 * `items`, each converted and encoded as it is written: no array of converted
 * messages is held, so each dies young instead of all surviving into the old
 * generation until the whole list is encoded. An agent's ListDevices of 4,352
 * devices peaked ~10 MiB higher built as one array (bench/README.md,
 * "Regressions, stop 45"). `rest` holds the field empty.
 */
export function encodeItemByItem<T, Item, Pb>(
  codec: WriterCodec<T>,
  field: number,
  items: Iterable<Item>,
  itemCodec: WriterCodec<Pb>,
  convert: (item: Item) => Pb,
  rest: T,
): Encoded<T> {
  const writer = new BinaryWriter();
  const tag = (field << 3) | 2; // length-delimited
  for (const item of items) itemCodec.encode(convert(item), writer.uint32(tag).fork()).join();
  const u8 = codec.encode(rest, writer).finish();
  return new Encoded<T>(Buffer.from(u8.buffer, u8.byteOffset, u8.byteLength));
}

/** The definition with every response serializer passing `Encoded` bytes through. */
export function passEncodedResponses<D extends ServiceDefinition>(definition: D): D {
  const out: Record<string, unknown> = {};
  for (const [name, method] of Object.entries(definition)) {
    const serialize = method.responseSerialize;
    out[name] = {
      ...method,
      responseSerialize: (value: unknown) => (value instanceof Encoded ? value.bytes : serialize(value)),
    };
  }
  return out as D;
}
