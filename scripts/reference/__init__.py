"""The project's Python references, imported by the scripts in scripts/ and benchmarks/ (put
scripts/ on sys.path, then `from reference import retnet`):

    retnet.py          the NumPy float64 reference of docs/NUMERICS.md and docs/FORMATS.md: the
                       logits of every checkpoint family (the oracle of tests/data)
    retnet_torch.py    the PyTorch decoders the benchmarks measure: RetNetDecoder (parallel,
                       chunkwise and recurrent forms; benchmarks/compare_pytorch.py) and
                       FlaDecoder (fla's checkpoints; benchmarks/real_size.py)
    sampler.py         the sampler of include/retnet/text/sampler.hpp and its golden values
    safetensors_io.py  the one safetensors reader and writer
"""
