# systemd-vm's checks (see systemd_vm.rs), run by guest-check.service with systemd as
# PID 1: the shipped units start ioserve, an operator's upgrade (the binary renamed
# over, then the README's SIGUSR2 command), and what systemd makes of it. Each command's
# output goes between the markers the host cuts the console into.
export PATH=/bin:/usr/bin
# systemctl on a terminal: no pager, no colours.
export SYSTEMD_PAGER= SYSTEMD_COLORS=0 TERM=dumb
run() { name=$1; shift; echo "@@@ begin $name"; "$@" 2>&1; echo "@@@ end $name rc=$?"; }
printf '#!/bin/sh\nexec systemctl show ioserve.service -p MainPID -p ActiveState -p SubState -p Result -p NRestarts\n' >/bin/show
chmod +x /bin/show
main_pid() { systemctl show ioserve.service -p MainPID --value; }

run pid1 cat /proc/1/comm
# Type=notify: start returns once ioserve has said READY=1.
run start systemctl start ioserve.service
run started show
old=$(main_pid)
run served-before wget -q -O - http://127.0.0.1/hello.txt

# A package upgrade: the new build renamed over the old one, then the signal.
cp /srv/ioserve-next /usr/bin/ioserve.new && mv /usr/bin/ioserve.new /usr/bin/ioserve
run upgrade sh -c 'kill -USR2 "$(systemctl show --property MainPID --value ioserve)"'
# Until systemd names another main process and the old one has exited (60 s at most).
n=0
while { [ "$(main_pid)" = "$old" ] || [ -e "/proc/$old" ]; } && [ $n -lt 600 ]; do
    sleep 0.1
    n=$((n + 1))
done
new=$(main_pid)
run upgraded sh -c "show; echo OldPID=$old; echo Polls=$n; \
    if [ -e /proc/$old ]; then echo Old=running; else echo Old=exited; fi"
run new-process sh -c "readlink /proc/$new/exe; cat /proc/$new/cgroup"
run served-after wget -q -O - http://127.0.0.1/hello.txt
# systemctl reload signals $MAINPID: the new process must be the one that reloads.
# systemctl can return while the unit is still "reloading" (ioserve's RELOADING=1
# until its READY=1): wait for that to end (60 s at most) before reading the state.
run reload sh -c 'systemctl reload ioserve.service || exit 1; n=0; \
    while [ "$(systemctl show ioserve.service -p ActiveState --value)" = reloading ] \
        && [ $n -lt 600 ]; do sleep 0.1; n=$((n + 1)); done; show; echo Polls=$n'
run stop sh -c 'systemctl stop ioserve.service; show'
run log cat /run/ioserve.log
# What systemd said about the service (it logs to the kernel's ring here), without
# the kernel's time stamps (the host takes such lines for the kernel's own).
run systemd-log sh -c "dmesg | grep 'systemd\\[1\\]: .*ioserve' | sed 's/^\\[[^]]*\\] //'"
echo '@@@ done'
poweroff -f
