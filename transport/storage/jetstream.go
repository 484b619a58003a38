package storage

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/nats-io/nats.go/jetstream"
)

// Default bucket names.
const (
	DefaultStateBucket = "weir_state"
	DefaultMetaBucket  = "weir_checkpoints"
)

// ObjectStore stores objects in a JetStream Object Store bucket.
type ObjectStore struct {
	os     jetstream.ObjectStore
	bucket string
}

// NewObjectStore opens (creating if needed) the object store bucket with
// file storage.
func NewObjectStore(ctx context.Context, js jetstream.JetStream, bucket string) (*ObjectStore, error) {
	os, err := js.CreateOrUpdateObjectStore(ctx, jetstream.ObjectStoreConfig{
		Bucket: bucket, Storage: jetstream.FileStorage, Description: "weir checkpoint state",
	})
	if err != nil {
		return nil, fmt.Errorf("storage: object store %s: %w", bucket, err)
	}
	return &ObjectStore{os: os, bucket: bucket}, nil
}

// Location names the bucket ("jetstream object store BUCKET").
func (s *ObjectStore) Location() string { return "jetstream object store " + s.bucket }

// Put uploads the object in chunks; it becomes visible when complete.
func (s *ObjectStore) Put(ctx context.Context, key string, r io.Reader) error {
	if err := CheckKey(key); err != nil {
		return err
	}
	if _, err := s.os.Put(ctx, jetstream.ObjectMeta{Name: key}, r); err != nil {
		return fmt.Errorf("storage put %s: %w", key, err)
	}
	return nil
}

// Get opens the object; its digest is verified when it is read to the end.
func (s *ObjectStore) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	res, err := s.os.Get(ctx, key)
	if err != nil {
		if errors.Is(err, jetstream.ErrObjectNotFound) {
			return nil, notExist(key, err)
		}
		return nil, fmt.Errorf("storage get %s: %w", key, err)
	}
	return res, nil
}

// Delete removes the objects whose names start with prefix.
func (s *ObjectStore) Delete(ctx context.Context, prefix string) error {
	keys, err := s.List(ctx, prefix)
	if err != nil {
		return err
	}
	for _, k := range keys {
		if err := s.os.Delete(ctx, k); err != nil && !errors.Is(err, jetstream.ErrObjectNotFound) {
			return fmt.Errorf("storage delete %s: %w", k, err)
		}
	}
	return nil
}

// List returns the names of live objects starting with prefix.
func (s *ObjectStore) List(ctx context.Context, prefix string) ([]string, error) {
	infos, err := s.os.List(ctx)
	if err != nil {
		if errors.Is(err, jetstream.ErrNoObjectsFound) {
			return nil, nil
		}
		return nil, fmt.Errorf("storage list %s: %w", prefix, err)
	}
	var keys []string
	for _, in := range infos {
		if !in.Deleted && strings.HasPrefix(in.Name, prefix) {
			keys = append(keys, in.Name)
		}
	}
	sort.Strings(keys)
	return keys, nil
}

// KV stores small objects in a JetStream Key-Value bucket (values are
// limited by the server's max payload, 1 MiB by default).
type KV struct {
	kv     jetstream.KeyValue
	bucket string
}

// NewKV opens (creating if needed) the KV bucket with file storage.
func NewKV(ctx context.Context, js jetstream.JetStream, bucket string) (*KV, error) {
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket: bucket, Storage: jetstream.FileStorage, Description: "weir checkpoint metadata",
	})
	if err != nil {
		return nil, fmt.Errorf("storage: kv %s: %w", bucket, err)
	}
	return &KV{kv: kv, bucket: bucket}, nil
}

// Location names the bucket ("jetstream kv BUCKET").
func (s *KV) Location() string { return "jetstream kv " + s.bucket }

// Put stores the value; one KV put is atomic.
func (s *KV) Put(ctx context.Context, key string, r io.Reader) error {
	if err := CheckKey(key); err != nil {
		return err
	}
	data, err := io.ReadAll(r)
	if err != nil {
		return fmt.Errorf("storage put %s: %w", key, err)
	}
	if _, err := s.kv.Put(ctx, key, data); err != nil {
		return fmt.Errorf("storage put %s: %w", key, err)
	}
	return nil
}

// Get returns the value.
func (s *KV) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	if err := CheckKey(key); err != nil {
		return nil, err
	}
	e, err := s.kv.Get(ctx, key)
	if err != nil {
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			return nil, notExist(key, err)
		}
		return nil, fmt.Errorf("storage get %s: %w", key, err)
	}
	return io.NopCloser(bytes.NewReader(e.Value())), nil
}

// Delete purges the keys starting with prefix.
func (s *KV) Delete(ctx context.Context, prefix string) error {
	keys, err := s.List(ctx, prefix)
	if err != nil {
		return err
	}
	for _, k := range keys {
		if err := s.kv.Purge(ctx, k); err != nil {
			return fmt.Errorf("storage delete %s: %w", k, err)
		}
	}
	return nil
}

// List returns the live keys starting with prefix.
func (s *KV) List(ctx context.Context, prefix string) ([]string, error) {
	all, err := s.kv.Keys(ctx)
	if err != nil {
		if errors.Is(err, jetstream.ErrNoKeysFound) {
			return nil, nil
		}
		return nil, fmt.Errorf("storage list %s: %w", prefix, err)
	}
	var keys []string
	for _, k := range all {
		if strings.HasPrefix(k, prefix) {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	return keys, nil
}
