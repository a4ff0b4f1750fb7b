# Stand-in for zookeeper:3.9: Debian's ZooKeeper on Debian's Java, with the official image's
# interface as docker-compose.yml uses it: ZOO_* variables written into the configuration, data in
# /data and /datalog, the client port 2181, and `zkServer.sh status` for the healthcheck.
# Differs from the official image: ZooKeeper 3.8 (Debian bookworm's), and only the ZOO_* variables
# listed in zookeeper-entrypoint.sh are honoured.
ARG BASE
FROM ${BASE}
RUN apt-get update \
    && apt-get install -y --no-install-recommends zookeeper default-jre-headless netcat-openbsd \
    && rm -rf /var/lib/apt/lists/* \
    && mkdir -p /data /datalog /conf
COPY zookeeper-entrypoint.sh /usr/local/bin/docker-entrypoint.sh
ENV PATH=/usr/share/zookeeper/bin:$PATH ZOOCFGDIR=/conf ZOO_LOG_DIR=/datalog
VOLUME ["/data", "/datalog"]
EXPOSE 2181
ENTRYPOINT ["/usr/local/bin/docker-entrypoint.sh"]
CMD ["zkServer.sh", "start-foreground"]
