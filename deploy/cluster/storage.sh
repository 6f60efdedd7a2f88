#!/usr/bin/env bash
# Storage for the one-node cluster: a default StorageClass without a provisioner and a pool of hostPath
# PersistentVolumes under $STATE/pv. A volume whose claim was deleted (Released) is wiped and made
# Available again, so the pool never runs dry and no data outlives its claim; test:cluster runs this
# after every uninstall.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
K="$BIN/kubectl --kubeconfig $KUBECONFIG_ADMIN"
POOL=${PI_CLUSTER_PV_COUNT:-10}
{
  cat <<EOY
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: standard
  annotations: { storageclass.kubernetes.io/is-default-class: "true" }
provisioner: kubernetes.io/no-provisioner
volumeBindingMode: WaitForFirstConsumer
reclaimPolicy: Retain
EOY
  for i in $(seq 1 "$POOL"); do
    mkdir -p "$STATE/pv/$i"; chmod 1777 "$STATE/pv/$i"
    cat <<EOY
---
apiVersion: v1
kind: PersistentVolume
metadata: { name: pi-pv-$i, labels: { pi-cluster/pool: "true" } }
spec:
  capacity: { storage: 8Gi }
  accessModes: [ReadWriteOnce]
  persistentVolumeReclaimPolicy: Retain
  storageClassName: standard
  hostPath: { path: $STATE/pv/$i, type: Directory }
EOY
  done
} | $K apply -f - >/dev/null
for pv in $($K get pv -l pi-cluster/pool=true -o jsonpath='{range .items[?(@.status.phase=="Released")]}{.metadata.name}{"\n"}{end}'); do
  dir=$($K get pv "$pv" -o jsonpath='{.spec.hostPath.path}')
  case $dir in "$STATE"/pv/*) find "$dir" -mindepth 1 -delete ;; esac
  $K patch pv "$pv" --type=json -p '[{"op":"remove","path":"/spec/claimRef"}]' >/dev/null
  log "volume $pv wiped and available again"
done
