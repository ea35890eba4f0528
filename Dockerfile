# tierd in a container (e.g. a Kubernetes DaemonSet mounting the node's NVMe checkpoint dir).
FROM python:3.11-slim
WORKDIR /opt/tierd
COPY pyproject.toml README.md constraints.txt ./
COPY client ./client
COPY tierd ./tierd
# The libraries' versions `make` and CI test with (constraints.txt; `make lock` refreshes it). The
# daemon (.) depends on the client's distribution, built from the same tree (client/).
RUN pip install --no-cache-dir -c constraints.txt ./client .
ENV TIERD_CONFIG=/etc/tierd/config.yaml
EXPOSE 8470
# Run the migrations, then the daemon; SIGTERM drains in-flight transfers.
CMD ["sh", "-c", "tierd db upgrade && exec tierd run"]
