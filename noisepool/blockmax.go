package noisepool

import "github.com/tpcoord/tpcoord/internal/blockmax"

// BlockSize is the number of tokens whose noise a pool row's BlockMax
// bounds together: the sampler's block, so that one compare of a block's
// largest logit and largest noise skips the block without reading its
// noise.
const BlockSize = blockmax.Size

// BlockCount is the number of blocks of a row of vocab tokens.
func BlockCount(vocab int) int { return blockmax.Count(vocab) }

// FillBlockMax sets dst[b] to the largest of
// values[b*BlockSize : (b+1)*BlockSize] (the last block may be shorter; a
// zero maximum is +0). len(dst) must be at least BlockCount(len(values));
// values hold no NaN (noise never does). It runs the fastest kernel of
// package blockmax this machine has (AVX2 on amd64).
func FillBlockMax(values, dst []float32) {
	blockmax.Row(values, dst[:BlockCount(len(values))])
}
