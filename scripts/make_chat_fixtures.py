#!/usr/bin/env python3
"""Chat-template fixtures for tests/models/chat.rs: transformers' own rendering.

    python3 scripts/make_chat_fixtures.py [--extract openvino.genai/tests/python_tests/data/tokenizer_configs.py]

For every tests/data/chat/<model>/tokenizer_config.json, renders one conversation (system, user,
assistant, user) with `PreTrainedTokenizerFast.apply_chat_template(tokenize=False)`, with and
without `add_generation_prompt`, into tests/data/chat/<model>/expected.json. A template that
refuses the conversation (Gemma has no system role) records transformers' error message instead.

`--extract FILE` first writes the tokenizer_config.json of the models in EXTRACT below from
openvino.genai's test data (a dictionary of the `bos_token`, `eos_token`, `pad_token`,
`unk_token` and `chat_template` fields of each model's real tokenizer_config.json); the
DeepSeek file is the model's complete tokenizer_config.json, committed as published.
"""

import argparse
import ast
import json
from pathlib import Path

from tokenizers import Tokenizer
from tokenizers.models import WordLevel
from transformers import PreTrainedTokenizerFast

ROOT = Path(__file__).resolve().parent.parent / "tests" / "data" / "chat"

# Fixture directory -> Hugging Face model id in openvino.genai's collection.
EXTRACT = {
    "qwen2.5-instruct": "Qwen/Qwen2.5-3B-Instruct",
    "llama-3.1-instruct": "meta-llama/Llama-3.1-8B-Instruct",
    "phi-3.5-mini-instruct": "microsoft/Phi-3.5-mini-instruct",
    "gemma-it": "google/gemma-2b-it",
}

SPECIAL = ["bos_token", "eos_token", "unk_token", "pad_token"]

# Leading and trailing spaces (Llama 3 trims), non-ASCII text, and a DeepSeek-R1 reasoning
# block its template cuts from past assistant turns.
MESSAGES = [
    {"role": "system", "content": "You are a concise assistant. "},
    {"role": "user", "content": "What is the capital of France?"},
    {"role": "assistant", "content": "<think>\nEasy.\n</think>\n\nThe capital of France is Paris."},
    {"role": "user", "content": "  And of Japan? Answer in one word — «Tokyo» or not.\n"},
]


def extract(collection: Path) -> None:
    tree = ast.parse(collection.read_text())
    fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef))
    configs = ast.literal_eval(next(n for n in fn.body if isinstance(n, ast.Return)).value)
    for name, model in EXTRACT.items():
        c = configs[model]
        out = {k: c[k] for k in SPECIAL + ["chat_template"] if k in c}
        d = ROOT / name
        d.mkdir(parents=True, exist_ok=True)
        (d / "tokenizer_config.json").write_text(json.dumps(out, indent=2, ensure_ascii=False) + "\n")


def token(v):
    """A special token as tokenizer_config.json holds it: a string or an AddedToken object."""
    return v.get("content") if isinstance(v, dict) else v


def render(config: dict, add_generation_prompt: bool) -> dict:
    special = {k: token(config.get(k)) for k in SPECIAL if token(config.get(k)) is not None}
    # A word-level vocabulary of the special tokens only: rendering never tokenizes.
    vocab = {t: i for i, t in enumerate(dict.fromkeys(special.values()))}
    vocab.setdefault("[UNK]", len(vocab))
    tok = PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer(WordLevel(vocab, unk_token="[UNK]")),
        chat_template=config["chat_template"],
        **special,
    )
    try:
        text = tok.apply_chat_template(MESSAGES, tokenize=False, add_generation_prompt=add_generation_prompt)
        return {"text": text}
    except Exception as e:  # jinja2's TemplateError from raise_exception
        return {"error": str(e)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--extract", type=Path)
    args = ap.parse_args()
    if args.extract:
        extract(args.extract)
    import transformers

    for d in sorted(p for p in ROOT.iterdir() if (p / "tokenizer_config.json").is_file()):
        config = json.loads((d / "tokenizer_config.json").read_text())
        expected = {
            "transformers_version": transformers.__version__,
            "messages": MESSAGES,
            "without_generation_prompt": render(config, False),
            "with_generation_prompt": render(config, True),
        }
        (d / "expected.json").write_text(json.dumps(expected, indent=2, ensure_ascii=False) + "\n")
        print(d.name, {k: list(v) for k, v in expected.items() if isinstance(v, dict)})


if __name__ == "__main__":
    main()
