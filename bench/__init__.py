"""xlarun's benchmarks: xlarun against what users would do instead, on the same data, in the same run.

``python -m bench [--quick] [--size small|medium|large] [--out FILE | --record]`` builds its own
workloads (a transformer-like JAX training step captured pass by pass, and a synthetic store of
many runs), times every comparison as a median over repeats, and prints ratios against targets.
Targets are reported, never asserted.
"""
