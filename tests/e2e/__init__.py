"""End-to-end tests against a real kube-apiserver and etcd on 127.0.0.1 (see README.md)."""
