#!/usr/bin/env python3
"""Write a small byte-level BPE tokenizer directory for running the public Strata server in tests.

    python3 make_tokenizer.py DIR

DIR gets vocab.json ({token: id}), merges.txt (one "left right" pair per line, no trailing newline) and
token_type.json (one integer per id: 1 normal, 3 control, 4 user-defined), the three files the Strata server
reads from its profile's "tokenizer" directory.  The content is generated here:

* ids 0..255 are the 256 single-byte tokens, in byte order (token = the byte's printable stand-in character,
  the usual byte-level BPE alphabet), so every UTF-8 text encodes and byte b is always id b;
* then the chat-template specials (control: <|im_start|>, <|im_end|>, <|endoftext|>, vision markers;
  user-defined: <think>, </think>, tool tags);
* then a few whole-word tokens built by prefix merges, so that common prompt words and the stand-in
  engine's reply take fewer ids.

Stdlib only; Python 3.9+.  Importable: `build()` returns (tokens, merges, types); `write(dir)` writes them.
"""
from __future__ import annotations

import json
import os
import sys

CONTROL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>",
           "<|image_pad|>", "<|video_pad|>"]
USER_DEFINED = ["<think>", "</think>", "<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>"]

# Words that get their own token (a leading space is part of the word, as byte-level BPE spells it).
WORDS = ["\n\n", "Hello", " from", " the", " stand", "-in", " engine", ".", " Strata", " test",
         " you", " are", " is", " and", " a", " to", " of", " in", " it", " answer", " hello", "user",
         "assistant", "system", " Reasoning", " effort", " set", " xhigh", " Please", " think"]


def byte_alphabet() -> dict[int, str]:
    """byte -> printable character.  Visible Latin-1 bytes stand for themselves; the other 68 (controls, space,
    DEL, NBSP, soft hyphen, ...) take the characters from U+0100 on, in byte order."""
    visible = set(range(ord("!"), ord("~") + 1)) | set(range(0xA1, 0xAD)) | set(range(0xAE, 0x100))
    table, shifted = {}, 0
    for b in range(256):
        if b in visible:
            table[b] = chr(b)
        else:
            table[b] = chr(0x100 + shifted)
            shifted += 1
    return table


def spell(text: str, alphabet: dict[int, str]) -> str:
    return "".join(alphabet[b] for b in text.encode("utf-8"))


def build():
    alphabet = byte_alphabet()
    tokens: list[str] = [alphabet[b] for b in range(256)]
    types: list[int] = [1] * 256
    for s in CONTROL:
        tokens.append(s)
        types.append(3)
    for s in USER_DEFINED:
        tokens.append(s)
        types.append(4)
    known = set(tokens)
    merges: list[str] = []
    seen_pairs = set()
    for word in WORDS:
        w = spell(word, alphabet)
        # prefix chain: w[0] + w[1] -> w[:2], w[:2] + w[2] -> w[:3], ...; every merge result is itself a token
        for i in range(1, len(w)):
            left, right = w[:i], w[i]
            if (left, right) in seen_pairs:
                continue
            seen_pairs.add((left, right))
            merges.append(f"{left} {right}")
            if w[:i + 1] not in known:
                known.add(w[:i + 1])
                tokens.append(w[:i + 1])
                types.append(1)
    return tokens, merges, types


def write(directory: str) -> dict:
    tokens, merges, types = build()
    os.makedirs(directory, exist_ok=True)
    vocab = {t: i for i, t in enumerate(tokens)}
    with open(os.path.join(directory, "vocab.json"), "w", encoding="utf-8") as f:
        json.dump(vocab, f, ensure_ascii=False)
    with open(os.path.join(directory, "merges.txt"), "w", encoding="utf-8", newline="") as f:
        f.write("\n".join(merges))          # no trailing newline: the server splits on "\n" and an empty line is no pair
    with open(os.path.join(directory, "token_type.json"), "w", encoding="utf-8") as f:
        json.dump(types, f)
    return {"vocab_size": len(tokens), "merges": len(merges)}


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[1].startswith("-"):
        print(__doc__.strip().splitlines()[0] + "\nusage: make_tokenizer.py DIR", file=sys.stderr)
        return 2
    info = write(argv[1])
    print(f"{argv[1]}: vocab {info['vocab_size']}, merges {info['merges']}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
