//go:build !agentonly

package natsbus

import (
	"fmt"
	"net/url"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/tpcoord/tpcoord/broadcast"
)

// ClientPermissions are what a job's clients may do on its bus: publish
// requests (generate), cancels and keepalives (client) and status requests
// on the job's subjects, and read their own inboxes. Only ranks publish
// steps, heartbeats, replays and control messages.
func ClientPermissions(subj broadcast.Subjects) *server.Permissions {
	return &server.Permissions{
		Publish:   &server.SubjectPermission{Allow: []string{subj.Generate(), subj.Client(), subj.Status()}},
		Subscribe: &server.SubjectPermission{Allow: []string{"_INBOX.>"}},
	}
}

// ServeJob starts a server for one job with separate credentials for its
// ranks and its clients: rankURL (nats://USER:PASSWORD@HOST:PORT) says
// where it listens and what ranks present (they may do anything);
// clientURL's user and password are the clients' (ClientPermissions). A
// client that publishes a step, a heartbeat or a control message is
// refused by the server.
func ServeJob(rankURL, clientURL string, subj broadcast.Subjects) (*Server, error) {
	u, opts, err := serverOptions(rankURL)
	if err != nil {
		return nil, err
	}
	cu, err := url.Parse(clientURL)
	if err != nil || cu.User == nil {
		return nil, fmt.Errorf("nats-serve: the client URL %s has no user", Redact(clientURL))
	}
	cpw, ok := cu.User.Password()
	switch {
	case opts.Username == "":
		return nil, fmt.Errorf("nats-serve: %s: ranks need a user and password when clients have their own", Redact(rankURL))
	case !ok || cpw == "" || cu.User.Username() == "":
		return nil, fmt.Errorf("nats-serve: %s: empty client user or password", Redact(clientURL))
	case cu.User.Username() == opts.Username:
		return nil, fmt.Errorf("nats-serve: ranks and clients must be different users, both are %q", opts.Username)
	}
	opts.Users = []*server.User{
		{Username: opts.Username, Password: opts.Password},
		{Username: cu.User.Username(), Password: cpw, Permissions: ClientPermissions(subj)},
	}
	opts.Username, opts.Password = "", ""
	s, err := start(u, opts)
	if err != nil {
		return nil, err
	}
	cu.Host = urlHost(s.url)
	s.clientURL = cu.String()
	return s, nil
}

// ServeLoopbackJob starts a job's server on 127.0.0.1 with a free port and
// random passwords for its ranks and its clients.
func ServeLoopbackJob(subj broadcast.Subjects) (*Server, error) {
	rankURL, clientURL, err := JobURLs("127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	return ServeJob(rankURL, clientURL, subj)
}

func urlHost(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return ""
	}
	return u.Host
}
