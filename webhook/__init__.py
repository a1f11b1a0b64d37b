"""trainguard: policy-as-code admission for GPU training workloads on Kubernetes."""

__version__ = "0.1.0"
