package worker

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
)

// The TLS files of a worker's connections, loaded the one way every kvgate binary loads them:
// the gateway as a client (Spec.TLSCAFile, TLSCertFile, TLSKeyFile), kvbridge serve and the
// simulator as servers. Errors name the file, never key material.

// LoadClientTLS returns a client configuration trusting the CAs in caFile (the system roots
// when "") and presenting certFile/keyFile for mTLS when given.
func LoadClientTLS(caFile, certFile, keyFile string) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if caFile != "" {
		pool, err := loadPool(caFile)
		if err != nil {
			return nil, err
		}
		cfg.RootCAs = pool
	}
	if certFile != "" || keyFile != "" {
		cert, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, fmt.Errorf("worker: tls certificate %s / key %s: %w", certFile, keyFile, err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}

// LoadServerTLS returns a server configuration with certFile/keyFile, requiring client
// certificates signed by the CAs in clientCAFile when given (mTLS).
func LoadServerTLS(certFile, keyFile, clientCAFile string) (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("worker: tls certificate %s / key %s: %w", certFile, keyFile, err)
	}
	cfg := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	if clientCAFile != "" {
		if cfg.ClientCAs, err = loadPool(clientCAFile); err != nil {
			return nil, err
		}
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return cfg, nil
}

func loadPool(file string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("worker: tls CA file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("worker: tls CA file %s: no PEM certificate in it", file)
	}
	return pool, nil
}
