#!/bin/sh
# Writes /conf/zoo.cfg from the official image's ZOO_* variables, then runs the command.
set -e
if [ ! -f /conf/zoo.cfg ]; then
  {
    echo "dataDir=/data"
    echo "dataLogDir=/datalog"
    echo "tickTime=${ZOO_TICK_TIME:-2000}"
    echo "initLimit=${ZOO_INIT_LIMIT:-5}"
    echo "syncLimit=${ZOO_SYNC_LIMIT:-2}"
    echo "maxClientCnxns=${ZOO_MAX_CLIENT_CNXNS:-60}"
    echo "clientPort=2181"
    echo "autopurge.snapRetainCount=${ZOO_AUTOPURGE_SNAPRETAINCOUNT:-3}"
    echo "autopurge.purgeInterval=${ZOO_AUTOPURGE_PURGEINTERVAL:-0}"
    echo "4lw.commands.whitelist=${ZOO_4LW_COMMANDS_WHITELIST:-srvr}"
    echo "admin.enableServer=${ZOO_ADMINSERVER_ENABLED:-true}"
    for extra in $ZOO_CFG_EXTRA; do echo "$extra"; done
  } > /conf/zoo.cfg
  cp /etc/zookeeper/conf/log4j.properties /conf/ 2>/dev/null || true
fi
exec "$@"
