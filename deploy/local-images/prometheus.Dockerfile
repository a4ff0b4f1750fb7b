# Stand-in for prom/prometheus: Debian's Prometheus with the official image's interface as
# docker-compose.yml uses it: ENTRYPOINT prometheus, configuration at
# /etc/prometheus/prometheus.yml, data under /prometheus, port 9090, and wget for a healthcheck.
# Differs from the official image: Prometheus 2.42 (Debian bookworm's) instead of 3.x; the compose
# file's flags and scrape configuration mean the same in both.
ARG BASE
FROM ${BASE}
RUN apt-get update \
    && apt-get install -y --no-install-recommends prometheus wget \
    && rm -rf /var/lib/apt/lists/* \
    && mkdir -p /prometheus && chown nobody /prometheus
USER nobody
WORKDIR /prometheus
VOLUME ["/prometheus"]
EXPOSE 9090
ENTRYPOINT ["/usr/bin/prometheus"]
CMD ["--config.file=/etc/prometheus/prometheus.yml", "--storage.tsdb.path=/prometheus"]
