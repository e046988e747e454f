package launch

// SelfShare is how many processes launch's own GOMAXPROCS shares the
// cores among (rankproc.TuneSelf): itself and the nproc ranks, as one of
// nproc+1; but serving HTTP (launch --http) it takes them all, as Go's
// default would. The gateway's work comes in bursts (every stream's
// token, right after each step) while the ranks wait on their forward
// passes, and a single P queues a new request's first token behind the
// other streams' events.
func SelfShare(nproc int, serving bool) int {
	if serving {
		return 1
	}
	return nproc + 1
}
