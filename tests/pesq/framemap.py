#!/usr/bin/env python3
"""For each 20 ms frame of the decoded WAV, which frame of the reference it best matches
(normalised correlation, whole-frame offsets). Shows duplicates/skips from loss handling."""
import sys, numpy as np, soundfile as sf
r,_=sf.read(sys.argv[1],dtype='int16'); d,_=sf.read(sys.argv[2],dtype='int16')
r=r.astype(float); d=d.astype(float); F=160
nr=len(r)//F
R=r[:nr*F].reshape(nr,F)
Rn=R/ (np.linalg.norm(R,axis=1,keepdims=True)+1e-9)
out=[]
for i in range(len(d)//F):
    f=d[i*F:(i+1)*F]; e=np.linalg.norm(f)
    if e<2000: out.append('.'); continue
    c=Rn@(f/e); j=int(np.argmax(c))
    out.append(f"{j}" if c[j]>0.9 else f"?{j}")
print(' '.join(out))
