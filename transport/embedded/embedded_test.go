package embedded

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

func TestStartPublishRestartKeepsStream(t *testing.T) {
	dir := t.TempDir()
	srv, err := Start(Config{DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	if srv.Port() <= 0 {
		t.Fatalf("port %d", srv.Port())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	nc, err := srv.Connect()
	if err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "S", Subjects: []string{"s.>"}}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 10; i++ {
		if _, err := js.Publish(ctx, "s.a", []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	nc.Close()
	port := srv.Port()

	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	if srv.Port() != port {
		t.Fatalf("port changed on restart: %d -> %d", port, srv.Port())
	}
	nc, err = srv.Connect()
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ = jetstream.New(nc)
	st, err := js.Stream(ctx, "S")
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 10 {
		t.Fatalf("after restart: %d messages, want 10", info.State.Msgs)
	}
}

func TestInProcessAndCoreOnly(t *testing.T) {
	srv, err := Start(Config{NoJetStream: true, SyncAlways: true})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	nc, err := srv.ConnectInProcess()
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	sub, err := nc.SubscribeSync("a")
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Publish("a", []byte("hi")); err != nil {
		t.Fatal(err)
	}
	m, err := sub.NextMsg(5 * time.Second)
	if err != nil || string(m.Data) != "hi" {
		t.Fatalf("got %v %v", m, err)
	}
}

func TestMissingDataDir(t *testing.T) {
	if _, err := Start(Config{}); err == nil {
		t.Fatal("want error without DataDir")
	}
}
