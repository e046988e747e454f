package broadcast

import (
	"context"
	"fmt"
)

// Request publishes data on subject with a private reply inbox and returns
// the first reply, or ctx's error.
func Request(ctx context.Context, tr Transport, subject string, data []byte) ([]byte, error) {
	inbox := tr.NewInbox()
	reply := make(chan []byte, 1)
	noResponders := make(chan struct{}, 1)
	unsub, err := tr.Subscribe(inbox, func(m *Msg) {
		if IsNoResponders(m) {
			select {
			case noResponders <- struct{}{}:
			default:
			}
			return
		}
		select {
		case reply <- append([]byte(nil), m.Data...):
		default:
		}
	})
	if err != nil {
		return nil, err
	}
	defer func() { _ = unsub() }()
	if err := tr.Flush(ctx); err != nil {
		return nil, fmt.Errorf("request %s: %w", subject, err)
	}
	if err := tr.Publish(&Msg{Subject: subject, Reply: inbox, Data: data}); err != nil {
		return nil, fmt.Errorf("request %s: %w", subject, err)
	}
	select {
	case b := <-reply:
		return b, nil
	case <-noResponders:
		return nil, fmt.Errorf("request %s: %w", subject, ErrNoResponders)
	case <-ctx.Done():
		return nil, fmt.Errorf("request %s: no reply: %w", subject, ctx.Err())
	}
}
