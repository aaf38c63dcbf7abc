"""The peer of `examples/embed.rs --bench`: sentence-transformers on PyTorch's CPU path, on a
random model of all-MiniLM-L6-v2's size (bert, hidden 384, 6 layers, 12 heads, intermediate
1536, vocab 30522; mean pooling, Normalize) and 32 texts of about 12 tokens.

    pip install torch transformers tokenizers sentence-transformers
    python3 scripts/embed_peer.py --out /tmp/embed-bench [--iters 50] [--threads N]
    cargo run --release --features models --example embed -- --model /tmp/embed-bench \\
        --text-file /tmp/embed-bench/texts.txt --device cpu --bench 50

The first writes the model directory and `texts.txt`, then prints
`sentence-transformers: X sentences/s (batch 32, T tokens per text on average, N torch threads)`.
Both sides embed the same texts from the same files; run them in the same window."""
import argparse, os, shutil, time
import torch
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, decoders, processors, trainers

WORDS = ("the a quick brown fox jumps over lazy dog tensors live on every gpu vendor sentence embeddings "
         "compare meanings cat sits mat while sleeps similar sentences are close model weights run fast "
         "with small batches of text").split()


def texts(n=32, words=10):
    """n sentences of `words` whole words each (12 tokens with [CLS] and [SEP])."""
    return [" ".join(WORDS[(i * 7 + j * 3) % len(WORDS)] for j in range(words)).capitalize() + "."
            for i in range(n)]


def tokenizer():
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece()
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    tok.train_from_iterator([" ".join(WORDS)] * 50, trainers.WordPieceTrainer(vocab_size=400, special_tokens=specials))
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", tok.token_to_id("[CLS]")), ("[SEP]", tok.token_to_id("[SEP]"))])
    return tok


def write_model(out):
    from transformers import BertConfig, BertModel, PreTrainedTokenizerFast
    from sentence_transformers import SentenceTransformer, models as st
    raw = out + ".raw"
    PreTrainedTokenizerFast(tokenizer_object=tokenizer(), model_max_length=256, unk_token="[UNK]",
                            pad_token="[PAD]", cls_token="[CLS]", sep_token="[SEP]",
                            mask_token="[MASK]").save_pretrained(raw)
    cfg = BertConfig(vocab_size=30522, hidden_size=384, num_hidden_layers=6, num_attention_heads=12,
                     intermediate_size=1536, max_position_embeddings=512)
    torch.manual_seed(0)
    BertModel(cfg, add_pooling_layer=False).save_pretrained(raw, safe_serialization=True)
    t = st.Transformer(raw, max_seq_length=256)
    m = SentenceTransformer(modules=[t, st.Pooling(384, pooling_mode="mean"), st.Normalize()], device="cpu")
    m.save(out)
    shutil.rmtree(raw)
    with open(os.path.join(out, "texts.txt"), "w") as f:
        f.write("\n".join(texts()) + "\n")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="/tmp/embed-bench")
    ap.add_argument("--iters", type=int, default=50)
    # PyTorch's default is one thread per core; on a shared machine one thread can be faster.
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: PyTorch's default)")
    a = ap.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    if not os.path.exists(os.path.join(a.out, "modules.json")):
        write_model(a.out)
    from sentence_transformers import SentenceTransformer
    m = SentenceTransformer(a.out, device="cpu")
    ts = [l for l in open(os.path.join(a.out, "texts.txt")).read().splitlines() if l]
    tokens = sum(len(m.tokenizer(t)["input_ids"]) for t in ts) / len(ts)
    with torch.inference_mode():
        for _ in range(3):
            m.encode(ts, batch_size=32)
        t0 = time.perf_counter()
        for _ in range(a.iters):
            m.encode(ts, batch_size=32)
        secs = time.perf_counter() - t0
    print(f"sentence-transformers: {a.iters * len(ts) / secs:.1f} sentences/s (batch {len(ts)}, "
          f"{tokens:.1f} tokens per text on average, {torch.get_num_threads()} torch threads)")


if __name__ == "__main__":
    main()
