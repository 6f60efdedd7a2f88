#!/bin/bash
# What the chart's start script and topics job call under /opt/kafka/bin: the distribution's scripts
# (not published as Maven artifacts), reduced to the JVM options they pass.
exec java ${KAFKA_HEAP_OPTS:--Xmx256m} -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -Djava.awt.headless=true \
  ${KAFKA_LOG4J_OPTS:--Dlog4j.configuration=file:/opt/kafka/config/tools-log4j.properties} \
  -Dkafka.logs.dir="${LOG_DIR:-/tmp/kafka-logs}" -cp '/opt/kafka/libs/*' "$@"
