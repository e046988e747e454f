package worker

import (
	"context"
	"log/slog"
	"net"
)

// ServeAgent connects to the agent listening on the Unix socket path (it
// started this worker with --worker-cmd) and serves it until the agent
// shuts it down, the connection ends or ctx does.
func ServeAgent(ctx context.Context, path string, cfg ServeConfig) error {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return err
	}
	if err := Serve(ctx, conn, cfg); err != nil && ctx.Err() == nil {
		return err
	}
	return nil
}

// ListenAndServe listens on the Unix socket path and serves the agents
// that connect (--worker-socket), one at a time: a card has one owner. It
// returns when ctx ends (nil) or the listener fails.
func ListenAndServe(ctx context.Context, path string, cfg ServeConfig, log *slog.Logger) error {
	ln, err := net.Listen("unix", path)
	if err != nil {
		return err
	}
	log.Info("worker listening", "socket", path)
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	defer ln.Close()
	for {
		conn, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		if err := Serve(ctx, conn, cfg); err != nil && ctx.Err() == nil {
			log.Warn("agent connection ended", "err", err)
		}
	}
}
