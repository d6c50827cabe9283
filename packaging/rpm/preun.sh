# zkcron %preun ($1: 0 when the package is being removed, 1 on an upgrade).
if [ "$1" -eq 0 ]; then
    # Removal (%systemd_preun): the daemon releases its leases at once and lets running jobs
    # finish (shutdown_grace); then it is disabled.
    systemctl --no-reload disable --now zkcron.service >/dev/null 2>&1 || :
fi
