#!/bin/sh
# The fulfiller's boot script of one claim's machine, run once by cloud-init (runcmd): it
# installs the node software when the class asks for it (install.sh), learns the machine's
# provider ID from its metadata service when that was not known before the machine existed,
# runs `kubeadm join` with the JoinConfiguration the user data wrote, and removes the files
# that hold the claim's bootstrap token. A machine that has joined already (a re-run of
# cloud-init) is left as it is.
#
# It reports its progress to the claim's BootReport with the claim's own bootstrap token,
# which may do nothing else (docs/node-bootstrap.md): the stage it reached (Installing,
# Joining) and, when a step fails, the step and the last line of the failing command
# (Failed). A report that cannot be sent is only logged: it never stops the join.
#
# Settings come from /etc/fulfiller/boot.env (0600, written by cloud-init):
#
#   FULFILLER_INSTALL       packages: run install.sh first; none: the image has the software
#   FULFILLER_JOIN_CONFIG   the JoinConfiguration (0600)
#   FULFILLER_INSTANCE_ID_URL
#                           when set, the instance ID is read from this URL into the
#                           JoinConfiguration's provider ID (prefix + placeholder)
#   FULFILLER_REPORT_URL    the BootReport's status (unset: no reports); with
#   FULFILLER_REPORT_CA     the cluster CA and
#   FULFILLER_REPORT_AUTH   the Authorization header with the token (0600)
#   KUBERNETES_VERSION ...  install.sh's settings
set -u

env_file=${FULFILLER_BOOT_ENV:-/etc/fulfiller/boot.env}
# The settings are exported: install.sh reads its own from the environment.
set -a
# shellcheck disable=SC1090
. "$env_file"
set +a
FULFILLER_STATE=${FULFILLER_STATE:-/var/lib/fulfiller}
export FULFILLER_STATE
placeholder=__FULFILLER_INSTANCE_ID__
mkdir -p "$FULFILLER_STATE"

# report STAGE [STEP MESSAGE]: a merge patch of the BootReport's status. The message is cut
# to 512 printable ASCII characters and JSON-escaped.
report() {
  [ -n "${FULFILLER_REPORT_URL:-}" ] || return 0
  message=$(printf '%s' "${3:-}" | LC_ALL=C tr -cd '\040-\176' | cut -c1-512 | sed -e 's/\\/\\\\/g' -e 's/"/\\"/g')
  body=$(printf '{"status":{"stage":"%s","step":"%s","message":"%s"}}' "$1" "${2:-}" "$message")
  if ! curl -fsS --retry 3 --retry-delay 2 --connect-timeout 10 --max-time 30 \
    --cacert "$FULFILLER_REPORT_CA" -H @"$FULFILLER_REPORT_AUTH" \
    -H 'Content-Type: application/merge-patch+json' -X PATCH --data "$body" \
    -o /dev/null "$FULFILLER_REPORT_URL"; then
    echo "fulfiller-boot: could not report stage $1 (the join goes on)" >&2
  fi
}

# failed STEP MESSAGE: reports the failure and stops.
failed() {
  echo "fulfiller-boot: $1 failed: $2" >&2
  report Failed "$1" "$2"
  exit 1
}

# last_line FILE: the last line of FILE that is not blank.
last_line() {
  last=
  while IFS= read -r line; do
    case $line in *[![:space:]]*) last=$line ;; esac
  done <"$1"
  printf '%s' "$last"
}

# join_error FILE: the line of kubeadm's output that says why it failed: its first "[ERROR"
# line (a failed preflight check), else its "error execution phase" line, else its last line
# (kubeadm ends with a hint about --v=5).
join_error() {
  first='' phase=''
  while IFS= read -r line; do
    case $line in
      *"[ERROR "*) [ -n "$first" ] || first=$line ;;
      "error execution phase"* | error:*) phase=$line ;;
    esac
  done <"$1"
  printf '%s' "${first:-${phase:-$(last_line "$1")}}"
}

# Whatever happens, the token leaves the disk with this script.
trap 'rm -f "$FULFILLER_JOIN_CONFIG" "${FULFILLER_REPORT_AUTH:-}"' EXIT

kubelet_conf=${FULFILLER_KUBELET_KUBECONFIG:-/etc/kubernetes/kubelet.conf}
if [ -f "$kubelet_conf" ]; then
  echo "fulfiller-boot: this machine has joined already ($kubelet_conf); nothing to do"
  exit 0
fi

if [ "$FULFILLER_INSTALL" = packages ]; then
  report Installing install
  log=$FULFILLER_STATE/install.log
  rc=0
  sh "${FULFILLER_INSTALL_SCRIPT:-/usr/local/lib/fulfiller/install.sh}" >"$log" 2>&1 || rc=$?
  cat "$log"
  if [ "$rc" -ne 0 ]; then
    step=install message=''
    if [ -f "$FULFILLER_STATE/failure" ]; then
      { read -r step && IFS= read -r message; } <"$FULFILLER_STATE/failure" || true
    fi
    [ -n "$message" ] || message=$(last_line "$log")
    failed "$step" "$message"
  fi
fi

report Joining join
if [ -n "${FULFILLER_INSTANCE_ID_URL:-}" ]; then
  id=$(curl -fsS --retry 30 --retry-delay 2 --retry-connrefused --max-time 10 "$FULFILLER_INSTANCE_ID_URL" 2>"$FULFILLER_STATE/instance-id.err") ||
    failed provider-id "reading the instance ID from $FULFILLER_INSTANCE_ID_URL: $(last_line "$FULFILLER_STATE/instance-id.err")"
  case $id in
    '' | *[!A-Za-z0-9._:/-]*) failed provider-id "unusable instance ID '$id' from $FULFILLER_INSTANCE_ID_URL" ;;
  esac
  sed -i "s|$placeholder|$id|" "$FULFILLER_JOIN_CONFIG" ||
    failed provider-id "writing the provider ID into $FULFILLER_JOIN_CONFIG"
fi

log=$FULFILLER_STATE/join.log
rc=0
kubeadm join --config "$FULFILLER_JOIN_CONFIG" >"$log" 2>&1 || rc=$?
cat "$log"
if [ "$rc" -ne 0 ]; then
  failed join "kubeadm join exited with status $rc: $(join_error "$log")"
fi
echo "fulfiller-boot: joined"
