"""Writes the tiny random sentence-embedding models of tests/models/embed.rs with `transformers`,
`tokenizers` and `sentence-transformers`, and what `SentenceTransformer.encode` computes on them.

    pip install torch transformers tokenizers sentence-transformers
    python3 scripts/make_embed_fixtures.py      # writes tests/data/models/{bert,xlm-roberta}/

Each directory is a sentence-transformers model (modules.json, 1_Pooling/config.json, mean
pooling then Normalize, as all-MiniLM-L6-v2 is) with `expected.json`: the texts and the
embeddings of every pooling variant (mean, cls, max, each normalized or not), computed by
rebuilding the SentenceTransformer over the same weights with that pooling. Seeded, so rerunning
gives the same files; the Rust tests never need Python."""
import json, os, shutil
import torch
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, decoders, processors, trainers

OUT = os.path.join(os.path.dirname(__file__), "..", "tests", "data", "models")
CORPUS = ("The quick brown fox jumps over the lazy dog. Tensors live on every GPU vendor; sentence "
          "embeddings compare meanings. A cat sits on the mat while the dog sleeps. caf\u00e9 na\u00efve "
          "r\u00e9sum\u00e9 \u00fcber. Embeddings of similar sentences are close. ") * 20
# Different lengths (the batch is padded), one past max_seq_length (truncated), one empty.
TEXTS = ["The cat sits.",
         "A quick brown fox jumps over the lazy dog while tensors live on every GPU vendor.",
         "",
         "Sentence embeddings compare meanings of similar sentences on the mat; caf\u00e9 na\u00efve "
         "r\u00e9sum\u00e9 \u00fcber the quick brown fox and the lazy dog sleeps again and again."]
MAX_SEQ = 24


def wordpiece_tokenizer():
    """BERT's: lower-casing normalizer, WordPiece, [CLS] $A [SEP]."""
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece()
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    tok.train_from_iterator([CORPUS], trainers.WordPieceTrainer(vocab_size=300, special_tokens=specials))
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
                                                       special_tokens=[("[CLS]", cls), ("[SEP]", sep)])
    return tok, dict(unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]", sep_token="[SEP]",
                     mask_token="[MASK]")


def unigram_tokenizer():
    """XLM-R's: Metaspace pieces, Unigram, <s> $A </s>, <pad> = 1."""
    tok = Tokenizer(models.Unigram())
    tok.normalizer = normalizers.NFKC()
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.decoder = decoders.Metaspace()
    specials = ["<s>", "<pad>", "</s>", "<unk>"]
    tok.train_from_iterator([CORPUS], trainers.UnigramTrainer(vocab_size=300, special_tokens=specials,
                                                              unk_token="<unk>"))
    tok.post_processor = processors.TemplateProcessing(single="<s> $A </s>", pair="<s> $A </s> </s> $B </s>",
                                                       special_tokens=[("<s>", 0), ("</s>", 2)])
    return tok, dict(bos_token="<s>", eos_token="</s>", unk_token="<unk>", pad_token="<pad>",
                     cls_token="<s>", sep_token="</s>")


def scale_weights(model):
    """Wider random weights than the default 0.02, so tokens and poolings differ clearly."""
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "LayerNorm" in n and n.endswith("weight"):
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=g))
            elif n.endswith("bias"):
                p.copy_(0.1 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(0.2 * torch.randn(p.shape, generator=g))


def write(name, cfg_cls, model_cls, tok_fn, **cfg):
    from transformers import PreTrainedTokenizerFast
    from sentence_transformers import SentenceTransformer, models as st
    d = os.path.join(OUT, name)
    shutil.rmtree(d, ignore_errors=True)
    raw = d + ".raw"
    shutil.rmtree(raw, ignore_errors=True)
    tok, specials = tok_fn()
    PreTrainedTokenizerFast(tokenizer_object=tok, model_max_length=MAX_SEQ, **specials).save_pretrained(raw)
    config = cfg_cls(vocab_size=tok.get_vocab_size(), hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                     intermediate_size=64, hidden_act="gelu", **cfg)
    torch.manual_seed(0)
    m = model_cls(config, add_pooling_layer=False).eval()
    scale_weights(m)
    m.save_pretrained(raw, safe_serialization=True)

    def build(mode, normalize):
        t = st.Transformer(raw, max_seq_length=MAX_SEQ)
        mods = [t, st.Pooling(t.get_word_embedding_dimension(), pooling_mode=mode)]
        if normalize:
            mods.append(st.Normalize())
        return SentenceTransformer(modules=mods, device="cpu")

    variants = {}
    for mode in ["mean", "cls", "max"]:
        for norm in [False, True]:
            e = build(mode, norm).encode(TEXTS, convert_to_numpy=True, batch_size=32)
            variants[mode + ("_norm" if norm else "")] = e.tolist()
    build("mean", True).save(d)
    shutil.rmtree(raw)
    tk = Tokenizer.from_file(os.path.join(d, "tokenizer.json"))
    lengths = [len(tk.encode(t).ids) for t in TEXTS]
    with open(os.path.join(d, "expected.json"), "w") as f:
        json.dump({"texts": TEXTS, "max_seq_length": MAX_SEQ, "untruncated_lengths": lengths,
                   "embeddings": variants}, f)
    # Only what wgtensor (and sentence-transformers) reads is committed.
    for junk in ["README.md", "config_sentence_transformers.json"]:
        p = os.path.join(d, junk)
        if os.path.exists(p):
            os.remove(p)
    print(name, lengths, sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(d) for f in fs), "bytes")


def main():
    from transformers import BertConfig, BertModel, XLMRobertaConfig, XLMRobertaModel
    write("bert", BertConfig, BertModel, wordpiece_tokenizer, max_position_embeddings=64, type_vocab_size=2,
          pad_token_id=0)
    write("xlm-roberta", XLMRobertaConfig, XLMRobertaModel, unigram_tokenizer, max_position_embeddings=66,
          type_vocab_size=1, pad_token_id=1, bos_token_id=0, eos_token_id=2)


if __name__ == "__main__":
    main()
