"""Train the small tokenizer that SGLang's bench_serving needs (run inside the peer venv).

bench_serving loads a Hugging Face tokenizer client-side even for ``--dataset-name random-ids``
(to decode the random ids into a prompt and to retokenize the output). No model hub is reachable
here, so ``peer_setup.sh`` trains one: a byte-level BPE, 4,096 tokens, on the Python sources of the
pinned ``sglang==0.5.9`` wheel installed in the same venv — a corpus every machine that ran the
setup has byte for byte, which makes the tokenizer reproducible.

Usage: ``python peer_tokenizer.py OUT_DIR``
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

VOCAB_SIZE = 4096
CORPUS_BYTES = 4_000_000  # enough for stable merges; training stays a few seconds on one core
EOS = "<|endoftext|>"


def corpus() -> Iterator[str]:
    import sglang  # the pinned wheel: same bytes everywhere

    root = Path(sglang.__file__).parent
    budget = CORPUS_BYTES
    for path in sorted(root.rglob("*.py")):
        text = path.read_text(encoding="utf-8", errors="replace")
        yield text
        budget -= len(text)
        if budget <= 0:
            return


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: peer_tokenizer.py OUT_DIR", file=sys.stderr)
        return 2
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=[EOS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus(), trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=EOS, bos_token=EOS, unk_token=EOS)
    out = Path(argv[1])
    out.mkdir(parents=True, exist_ok=True)
    fast.save_pretrained(str(out))
    print(f"tokenizer: {out} (vocab {fast.vocab_size})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
