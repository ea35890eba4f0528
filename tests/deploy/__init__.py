"""Tests of what deploy/ and the Dockerfile ship: the container image, the Kubernetes manifests."""
