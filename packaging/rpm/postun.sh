# zkcron %postun ($1: 0 after removal, 1 after an upgrade).
systemctl daemon-reload >/dev/null 2>&1 || :
if [ "$1" -ge 1 ]; then
    # Upgrade (%systemd_postun_with_restart): the old daemon hands its leases to other nodes
    # and drains its jobs, then the new release starts and takes over. A stopped service stays
    # stopped.
    systemctl try-restart zkcron.service >/dev/null 2>&1 || :
fi
# rpm has no purge. As rpm does for every package, removal keeps a modified
# /etc/zkcron/zkcron.toml (as zkcron.toml.rpmsave), task files the admin added, and the fire
# records in /var/lib/zkcron; packaging/README.md says how to delete them.
