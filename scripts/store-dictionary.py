#!/usr/bin/env python3
"""Builds the store's compression dictionary (daemon/src/store/dictionary-N.bin) from a data
directory written by real traffic, and prints what it saves per table.

The dictionary is part of the on-disk format: a value compressed with it can only be read with
the same bytes, so a dictionary, once released, never changes; a better one is a new file with
a new number (see `store::encode`). This script is how dictionary 1 was made, kept so the next
one is made the same way:

    pip install lmdb msgpack lz4
    python3 scripts/store-dictionary.py DATA_DIR daemon/src/store/dictionary-2.bin

DATA_DIR is a daemon's `data` directory (e.g. copied from a `recalld-bench load` run while it
drains). What goes in is each table's commonest value *skeletons*: the MessagePack of its
values with every number zeroed, byte strings emptied and every string emptied but those half
the table's values hold (the built-in model's name on every stored vector) and short lower-case
names one value in ten holds (field values such as `request`, `chat_completions`; not a tool's
name), so the dictionary holds field names, enum names and structure, never anyone's text. Messages also get skeletons of
the provider formats the traffic did not use. Tables are laid out from the fewest entries to the
most, so the messages' skeletons sit last (LZ4 keeps the latest of equal sequences).
"""
import collections
import re
import sys

import lmdb
import lz4.block
import msgpack

MESSAGES_QUOTA = 2048  # bytes of message skeletons
TABLE_QUOTA = 192  # bytes of every other table's
NAME = re.compile(r"^[a-z][a-z_]{0,23}$")


def plain(v):
    """A stored value's MessagePack (values compressed without a dictionary, schema 2-8)."""
    if v[:1] == b"\xc1":
        size = int.from_bytes(v[1:5], "little")
        if size & (1 << 31):
            sys.exit("this data is compressed with a dictionary already: decode it first")
        return lz4.block.decompress(v[1:])
    return v


def strings(o):
    if isinstance(o, dict):
        for v in o.values():
            yield from strings(v)
    elif isinstance(o, list):
        for v in o:
            yield from strings(v)
    elif isinstance(o, str):
        yield o


def blank(o, keep=frozenset()):
    if isinstance(o, dict):
        return {k: blank(v, keep) for k, v in o.items()}
    if isinstance(o, list):
        return [blank(v, keep) for v in o]
    if isinstance(o, str):
        return o if o in keep else ""
    if isinstance(o, bytes):
        return b""
    if isinstance(o, bool) or o is None:
        return o
    if isinstance(o, int):
        return 0
    if isinstance(o, float):
        return 0.0
    return o


def pack(o):
    return msgpack.packb(o, use_bin_type=True)


def other_formats(chat):
    """The skeleton of a stored chat message turned into the other provider formats' shapes."""
    shapes = [
        ("anthropic_messages", {"role": "user", "content": [{"type": "text", "text": ""}]}),
        (
            "anthropic_messages",
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": ""},
                    {"type": "tool_use", "id": "", "name": "", "input": {}},
                ],
            },
        ),
        (
            "anthropic_messages",
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "", "content": ""}]},
        ),
        ("responses", {"type": "message", "role": "user", "content": [{"type": "input_text", "text": ""}]}),
        (
            "responses",
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": ""}]},
        ),
        ("responses", {"type": "function_call", "call_id": "", "name": "", "arguments": ""}),
        ("responses", {"type": "function_call_output", "call_id": "", "output": ""}),
    ]
    out = []
    for fmt, raw in shapes:
        m = dict(chat)
        m["message"] = {"raw": raw, "format": fmt}
        out.append(pack(m))
    return out


def main():
    data, out = sys.argv[1], sys.argv[2]
    env = lmdb.open(data, readonly=True, lock=True, max_dbs=64)
    with env.begin() as t:
        names = [k for k, _ in t.cursor()]
    tables = {}
    for n in names:
        db = env.open_db(n, create=False)
        with env.begin(db=db) as t:
            tables[n.decode()] = [plain(v) for _, v in t.cursor()]
    pieces = []
    for name, values in sorted(tables.items(), key=lambda kv: (len(kv[1]), kv[0])):
        if len(values) < 20:
            continue
        decoded = []
        for v in values[::2]:  # the even entries make it, the odd ones test it
            try:
                decoded.append(msgpack.unpackb(v, raw=False, strict_map_key=False))
            except ValueError:
                continue
        seen = collections.Counter(s for o in decoded for s in set(strings(o)))
        keep = frozenset(
            s for s, n in seen.items() if 2 * n >= len(decoded) or (NAME.match(s) and 10 * n >= len(decoded))
        )
        counts = collections.Counter(pack(blank(o, keep)) for o in decoded)
        quota = MESSAGES_QUOTA if name == "messages" else TABLE_QUOTA
        extra = []
        if name == "messages" and counts:
            first = msgpack.unpackb(counts.most_common(1)[0][0], raw=False)
            extra = other_formats(first)
            quota -= sum(map(len, extra))
        got = b""
        for skeleton, _ in counts.most_common():
            if len(got) + len(skeleton) <= quota:
                got = skeleton + got
        pieces.append(b"".join(extra) + got)
    dictionary = b"".join(pieces)
    with open(out, "wb") as f:
        f.write(dictionary)
    print(f"{out}: {len(dictionary)} bytes")

    def today(v):
        return len(v) if len(v) < 512 else min(5 + len(lz4.block.compress(v, store_size=False)), len(v))

    def with_dictionary(v):
        return len(v) if len(v) < 32 else min(5 + len(lz4.block.compress(v, dict=dictionary, store_size=False)), len(v))

    before = after = 0
    for name, values in sorted(tables.items()):
        test = values[1::2]
        if not test:
            continue
        a, b = sum(map(today, test)), sum(map(with_dictionary, test))
        before, after = before + a, after + b
        print(f"{name:14} {len(test):7} values: {a / len(test):7.1f} B -> {b / len(test):7.1f} B")
    print(f"all values: {before} -> {after} B ({after / before:.2f})")


if __name__ == "__main__":
    main()
