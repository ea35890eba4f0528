# tierd in a container (e.g. a Kubernetes DaemonSet mounting the node's NVMe checkpoint dir).
FROM python:3.11-slim
WORKDIR /opt/tierd
# aioboto3 pins botocore: install it first so pip does not backtrack.
RUN pip install --no-cache-dir "aioboto3==15.5.0"
COPY pyproject.toml README.md ./
COPY tierd ./tierd
RUN pip install --no-cache-dir .
ENV TIERD_CONFIG=/etc/tierd/config.yaml
EXPOSE 8470
# Run the migrations, then the daemon; SIGTERM drains in-flight transfers.
CMD ["sh", "-c", "tierd db upgrade && exec tierd run"]
