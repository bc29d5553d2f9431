"""The small GQA / SwiGLU Megatron-LM model the Megatron tests share (8 layers, hidden 1024, TP 2,
pipeline 2, 16 devices, bf16, sequence parallel, distributed optimizer); each test adds or
overrides its own flags."""

SMALL_GQA = {
    "num-layers": 8, "hidden-size": 1024, "num-attention-heads": 16, "group-query-attention": True,
    "num-query-groups": 4, "kv-channels": 64, "ffn-hidden-size": 4096, "swiglu": True,
    "normalization": "RMSNorm", "untie-embeddings-and-output-weights": True, "vocab-size": 32000,
    "seq-length": 2048, "tensor-model-parallel-size": 2, "pipeline-model-parallel-size": 2,
    "world-size": 16, "micro-batch-size": 1, "global-batch-size": 32, "use-distributed-optimizer": True,
    "sequence-parallel": True, "bf16": True,
}
