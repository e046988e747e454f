// Package membership is an agent's view of its job's members: each agent
// is a hashicorp/memberlist member whose metadata says which job and rank it serves; Cluster refuses
// members that do not belong (another job, another world size or config,
// a second claimant of a taken rank), completes the rendezvous of ranks
// 0..W-1, and reports lost peers.
//
// It does not run the decode loop and knows nothing of NATS beyond the URL
// it advertises.
package membership
