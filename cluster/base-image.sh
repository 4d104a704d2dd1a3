#!/usr/bin/env bash
# Build the local base image that cluster/Dockerfile starts from, without any container
# image registry.
#
# The image is made with `docker import` from a tiny root filesystem assembled on this
# machine: this machine's own `node` binary and npm, the glibc shared libraries they (and
# the native addons leveldown and @node-rs/crc32) load, the dynamic loader, the CA bundle,
# chrt, and busybox (or dash) as /bin/sh plus the few tools npm scripts and Dockerfile RUN steps
# use. Because the libraries are this machine's glibc, the glibc prebuilds of
# leveldown@6 load inside the image exactly as they do on the host.
#
# Where a registry is reachable, none of this is needed: build the app image from the
# official image instead, which is also Debian/glibc based:
#
#   docker build -f cluster/Dockerfile --build-arg BASE_IMAGE=node:20-bookworm-slim .
#   # or, for docker-compose: QUORUMQ_BASE_IMAGE=node:20-bookworm-slim docker-compose build
#
# Usage: cluster/base-image.sh [--force] [--tag NAME]
#   --force  rebuild even if the image already exists (otherwise it is skipped)
#   --tag    image name (default quorumq/node-base:20, the Dockerfile's BASE_IMAGE default)
set -euo pipefail

tag="quorumq/node-base:20"
force=0
while [ $# -gt 0 ]; do
  case "$1" in
    --force) force=1 ;;
    --tag) tag="$2"; shift ;;
    -h|--help) sed -n '2,22p' "$0"; exit 0 ;;
    *) echo "base-image: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done

# What the image holds changed at these revisions (2: chrt): an older image is rebuilt.
revision=2
if [ "$force" -eq 0 ] && docker image inspect "$tag" >/dev/null 2>&1; then
  have=$(docker image inspect -f '{{index .Config.Labels "quorumq.base.revision"}}' "$tag" 2>/dev/null || true)
  if [ "$have" = "$revision" ]; then
    echo "base-image: $tag exists (use --force to rebuild)"
    exit 0
  fi
  echo "base-image: $tag is of revision ${have:-1}, rebuilding it as revision $revision"
fi

node_bin=$(readlink -f "$(command -v node)")
node_prefix=$(dirname "$(dirname "$node_bin")") # /usr for Debian/NodeSource, /usr/local for tarballs
npm_dir="$node_prefix/lib/node_modules/npm"
[ -f "$npm_dir/bin/npm-cli.js" ] || { echo "base-image: npm not found at $npm_dir" >&2; exit 1; }
node_version=$("$node_bin" --version)
case "$node_version" in
  v20.*) ;;
  *) echo "base-image: warning: host node is $node_version, the image is tagged $tag" >&2 ;;
esac

# A shell and its tools: busybox if there is one (installed from Debian's busybox-static
# when we are root with apt), else dash alone.
busybox=$(command -v busybox || true)
if [ -z "$busybox" ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  echo "base-image: installing busybox-static from the Debian mirror"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq busybox-static >/dev/null 2>&1 \
    || { apt-get update -qq >/dev/null 2>&1 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq busybox-static >/dev/null 2>&1; } \
    || true
  busybox=$(command -v busybox || true)
fi
dash_bin=$(command -v dash || true)
[ -n "$busybox" ] || [ -n "$dash_bin" ] || { echo "base-image: need busybox or dash for /bin/sh" >&2; exit 1; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
root="$work/rootfs"
mkdir -p "$root"/usr/bin "$root"/usr/sbin "$root"/usr/lib/x86_64-linux-gnu "$root"/usr/lib64 \
  "$root"/usr/lib/node_modules "$root"/etc/ssl/certs "$root"/usr/etc \
  "$root"/tmp "$root"/root "$root"/home/node "$root"/app "$root"/data "$root"/proc "$root"/sys "$root"/dev
chmod 1777 "$root/tmp"
# Debian's merged /usr layout, so paths such as /lib64/ld-linux-x86-64.so.2 resolve.
ln -s usr/bin "$root/bin"
ln -s usr/sbin "$root/sbin"
ln -s usr/lib "$root/lib"
ln -s usr/lib64 "$root/lib64"

# Copy a file to the same path inside the rootfs (following symlinks for the content, and
# recreating the symlink name too), e.g. /lib/x86_64-linux-gnu/libc.so.6.
copy_path() {
  local src="$1" real dest
  real=$(readlink -f "$src")
  # Store everything under /usr (the /lib, /lib64 links point there).
  dest="$root/usr${real#/usr}"
  mkdir -p "$(dirname "$dest")"
  [ -e "$dest" ] || cp -p "$real" "$dest"
  if [ "$src" != "$real" ]; then
    local link="$root/usr${src#/usr}"
    case "$src" in /lib/*|/lib64/*) link="$root/usr$src" ;; esac
    if [ ! -e "$link" ] && [ "$link" != "$dest" ]; then
      mkdir -p "$(dirname "$link")"
      ln -s "$real" "$link"
    fi
  fi
}

# Shared libraries of a binary, as ldd resolves them (plus the loader).
copy_libs() {
  { ldd "$1" 2>/dev/null || true; } | awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\// && /ld-linux/ {print $1}' | while read -r lib; do
    copy_path "$lib"
  done
}

# node, and its libraries.
cp -p "$node_bin" "$root/usr/bin/node"
copy_libs "$node_bin"
# chrt (util-linux): a node puts V8's helper threads at SCHED_IDLE with it
# (packages/cli/src/helper-threads.ts); without it they keep their priority.
chrt_bin=$(command -v chrt || true)
if [ -n "$chrt_bin" ]; then
  cp -p "$(readlink -f "$chrt_bin")" "$root/usr/bin/chrt"
  copy_libs "$chrt_bin"
else
  echo "base-image: warning: no chrt on this machine (util-linux): nodes in the image keep V8's helper threads at normal priority" >&2
fi
# glibc pieces that native addons (leveldown, @node-rs/crc32) or name resolution may load
# at run time, which node itself does not link.
for lib in librt.so.1 libresolv.so.2 libnss_files.so.2 libnss_dns.so.2 libutil.so.1 libanl.so.1 \
           libstdc++.so.6 libgcc_s.so.1; do
  for dir in /lib/x86_64-linux-gnu /usr/lib/x86_64-linux-gnu; do
    if [ -e "$dir/$lib" ]; then copy_path "$dir/$lib"; break; fi
  done
done

# npm (and npx), from the node install.
cp -a "$npm_dir" "$root/usr/lib/node_modules/npm"
ln -s ../lib/node_modules/npm/bin/npm-cli.js "$root/usr/bin/npm"
ln -s ../lib/node_modules/npm/bin/npx-cli.js "$root/usr/bin/npx"
cat >"$root/usr/etc/npmrc" <<'EOF'
cafile=/etc/ssl/certs/ca-certificates.crt
fund=false
audit=false
update-notifier=false
EOF

# /bin/sh and tools. npm runs scripts with sh; bin links start with "#!/usr/bin/env node".
if [ -n "$busybox" ]; then
  cp -p "$(readlink -f "$busybox")" "$root/usr/bin/busybox"
  copy_libs "$busybox"
  for applet in $("$busybox" --list); do
    case "$applet" in busybox|node|npm|npx) continue ;; esac
    [ -e "$root/usr/bin/$applet" ] || ln -s busybox "$root/usr/bin/$applet"
  done
else
  cp -p "$dash_bin" "$root/usr/bin/dash"
  copy_libs "$dash_bin"
  ln -s dash "$root/usr/bin/sh"
  env_bin=$(readlink -f "$(command -v env)")
  cp -p "$env_bin" "$root/usr/bin/env"
  copy_libs "$env_bin"
fi

# CA certificates (npm inside a build, and TLS clients in general).
if [ -f /etc/ssl/certs/ca-certificates.crt ]; then
  cp -p /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/certs/ca-certificates.crt"
fi

# Minimal /etc.
cat >"$root/etc/passwd" <<'EOF'
root:x:0:0:root:/root:/bin/sh
node:x:1000:1000:node:/home/node:/bin/sh
nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin
EOF
cat >"$root/etc/group" <<'EOF'
root:x:0:
node:x:1000:
nogroup:x:65534:
EOF
printf 'hosts: files dns\n' >"$root/etc/nsswitch.conf"
printf '127.0.0.1 localhost\n::1 localhost\n' >"$root/etc/hosts"
cp /etc/os-release "$root/etc/os-release" 2>/dev/null || true
chown 1000:1000 "$root/home/node"

echo "base-image: importing $(du -sh "$root" | cut -f1) root filesystem as $tag (node $node_version)"
tar -C "$root" --numeric-owner -cf - . | docker import \
  --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change "ENV NODE_VERSION=${node_version#v}" \
  --change 'WORKDIR /app' \
  --change "LABEL quorumq.base.revision=$revision" \
  --change 'CMD ["node"]' \
  --message "quorumq node base: host node $node_version + glibc libraries, no registry" \
  - "$tag" >/dev/null
docker run --rm "$tag" node -e 'process.stdout.write("base-image: " + process.version + " runs in the image\n")'
