#!/bin/sh
# fetch_failing.sh ORIGINAL PATH BASE [CURL ARGS...]
#
# Downloads BASE/PATH, a file whose disk fails to read partway, and BASE/good beside it
# in one curl call (one connection over HTTP/2, two over HTTP/1.1), then prints what
# came of each: curl's exit code, the bytes received and the HTTP version per transfer,
# whether the failing file's bytes are the first bytes of ORIGINAL (its copy from
# before the disk failed), and whether the good file came whole.
original=$1 path=$2 base=$3
shift 3
rm -f /tmp/got /tmp/good-got
/usr/sbin/curl --silent --no-progress-meter --max-time 30 --cacert /srv/cert.pem --parallel --limit-rate 4M "$@" \
    --write-out 'transfer %{url_effective} exit=%{exitcode} bytes=%{size_download} http=%{http_version}\n' \
    -o /tmp/got "$base$path" -o /tmp/good-got "$base/good"
size=$(stat -c %s /tmp/got 2>/dev/null || echo 0)
if [ "$size" = 0 ] || head -c "$size" "$original" | cmp -s - /tmp/got; then
    echo "received $size bytes, the original's first"
else
    echo "received $size bytes, NOT the original's first"
fi
if cmp -s /srv/www/good /tmp/good-got; then
    echo "good file whole"
else
    echo "good file NOT whole"
fi
