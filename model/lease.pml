/* lease.pml: the lease protocol of leasequeue, for the Spin model checker.
 *
 * Mirrors lua/claim.lua, start.lua, renew.lua, ack.lua, fail.lua,
 * release.lua, reap.lua, cancel.lua, limiter_acquire/renew/release.lua
 * (the server: each script is one atomic step) and the worker's rules in
 * leasequeue/runtime/ (runs.py, claimer.py, starter.py, executor.py,
 * heartbeater.py, limits.py). model/README.md maps every action to its
 * script and says what is abstracted away. tests/test_model.py runs it.
 *
 * Time: the Redis server clock advances one tick at a time, whenever the
 * environment chooses (between any two steps, without bound). Every instant
 * is kept as the time left until it (a lease's expiry in the leases ZSET, a
 * limiter holder's expiry, the claim key's PX, and each worker's own
 * deadlines), counted down by each tick and stopping at 0: the state space
 * stays finite with an unbounded clock, and states that differ only in the
 * clock's origin are one. A worker-local deadline is the instant the worker
 * SENT the request that confirmed a lease (or slot) plus the lease, never
 * later than the instant the script ran, so it is never after the server's
 * expiry (clocks run at one rate; only durations are compared).
 *
 * Failures: any reply may be lost (the worker resends: claims with the same
 * claim id, start marks, settling writes; renewals are simply sent again at
 * the next beat) or arrive late, any worker may stall (nothing forces it to
 * act while the clock goes on), and a worker may crash (SIGKILL) and restart
 * empty. A request runs at the server in the step its worker sends it: a
 * request that runs later than it was sent is the same as one sent later,
 * except that its worker's deadline, counted from the send, is then earlier
 * than the server's expiry, so the model takes the worst case (the worker's
 * deadline equals the server's expiry). Only a claim's reply travels for a
 * while (the clock may move before it lands); the replies of renewals, start
 * marks, settling writes and limiter calls land in the step of the call or
 * are lost (a late reply is treated like a lost one: heartbeater.py stops
 * waiting for a renewal after a quarter of the lease).
 *
 * Planted bugs, each of which must make the check fail (tests/test_model.py):
 *   -DBUG_ACK_NO_TOKEN        ack.lua does not compare the token
 *   -DBUG_CLAIM_KEEPS_TOKEN   claim.lua leases without a new token
 *   -DBUG_SLOT_NO_STOP        the worker does not stop a run whose slot lapsed
 *   -DBUG_DEADLINE_AT_REPLY   the worker counts its lease from the reply, not the send
 *   -DBUG_RETRY_OLD_LEASE     a retried claim returns its jobs without renewing
 *                             their leases (claim.lua before this model found it)
 * and -DSTRICT_CHARGE checks the stronger "an attempt is charged only to a
 * run whose handler started", which fails: see model/README.md.
 */

/* ---- bounds (override with -D) ---- */
#ifndef MAXCL
#define MAXCL 1         /* claims each worker sends (resending one claim is free) */
#endif
#ifndef MAXCRASH
#define MAXCRASH 1      /* worker crashes in one execution */
#endif
#ifndef BATCHW
#define BATCHW 9        /* the worker whose claims may lease 2 jobs (9: none) */
#endif
#ifndef MAXCANCEL
#define MAXCANCEL 1     /* operator cancels in one execution */
#endif
#define NJ 2            /* jobs */
#define NW 2            /* workers */
#ifndef LEASE
#define LEASE 2         /* job lease, ticks */
#endif
#ifndef LLEASE
#define LLEASE 2        /* limiter lease, ticks */
#endif
#define MINSH 1         /* a run starts only while its lease stays valid this long (runs.py start) */
#define MAXATT 2        /* max_attempts */
#define MAXINF 2        /* max_infra */

/* ---- the job records (lua/_lib.lua RECORD_FIELDS) and keys ---- */
#define QUEUED 1
#define LEASED 2
#define SUCCEEDED 3
#define CANCELED 4
#define DEAD 5
#define TERMINAL(s) ((s) >= SUCCEEDED)

byte st[NJ] = QUEUED;   /* state (enqueue.lua ran for every job) */
byte tok[NJ];           /* fencing token */
byte att[NJ];           /* attempt */
byte inf[NJ];           /* infra_fail */
bool started[NJ];
bool cancel[NJ];
bool inready[NJ] = 1;   /* member of {P:Q}:ready */
bool inl[NJ];           /* member of {P:Q}:leases ... */
byte exp[NJ];           /* ... with this score: ticks left (0: expired, a reaper takes it) */
byte ctr;               /* {P:Q}:token, the per-queue token counter */
/* {P:Q}:claim:<worker>: the last claim's id and (id, token)s, PX lease */
byte ck_id[NW];
byte ck_tok[NW * NJ];
byte ck_exp[NW];        /* ticks left of the claim key (0: gone) */
/* the max_concurrent=1 limit (ZSET holder -> expiry); holder = (worker, job, token) */
bool lh[NW * NJ];
byte lh_tok[NW * NJ];
byte lh_exp[NW * NJ];   /* ticks left of the holder (0: lapsed, pruned by the next acquire) */

/* ---- the workers' run tables (runtime/runs.py RunRecord), index I(w, j) ---- */
#define I(w, j) ((w) * NJ + (j))
#define NONE 0
#define CL 1            /* claimed, not started */
#define RUN 2           /* handler running */
#define FIN 3           /* settling: its write (ack, fail or release) is on its way */
byte ph[NW * NJ];
byte wt[NW * NJ];       /* the run's token */
byte wdl[NW * NJ];      /* ticks its lease stays valid, by the worker's knowledge */
bool wsk[NW * NJ];      /* start_known: Redis counted its start */
#define S_LEASE 1
#define S_SLOT 2
#define S_CANCEL 3
#define O_ACK 1         /* ack.lua succeeded */
#define O_CANCEL 2      /* ack.lua canceled */
#define O_WORK 3        /* fail.lua work */
#define O_INFRA 4       /* fail.lua infra (its slot was lost) */
#define O_RELEASE 5     /* release.lua */
bool hs[NW * NJ];       /* holds its limiter slot */
byte wsdl[NW * NJ];     /* ticks its slot stays valid, by the worker's knowledge */

/* a claim runs at the server in the step it is sent; then cq: 0 no reply
 * awaited, 1 to be sent again (its reply was lost), 2 reply on the way */
byte cq[NW]; byte cq_id[NW]; byte ncl[NW];
byte cr_tok[NW * NJ]; bool cr_st[NW * NJ];
byte cr_dl[NW];         /* ticks left of the leases, counted from the claim's send */
byte sq[NW * NJ];       /* 1: a start mark to send (again) */
byte tq[NW * NJ];       /* 1: a settling write to send (again); tq_out: which */
byte tq_out[NW * NJ];
byte rr[NW * NJ];       /* a renewal's answer, read in the step of the call */
#define R_LOST 1
#define R_OK 2
#define R_CANCEL 3
#ifdef LIMIT
bool lr[NW * NJ];       /* a limiter renewal's answer, likewise */
byte xq[NW * NJ];       /* 1: a slot to give back (xq_tok: its holder's token) */
byte xq_tok[NW * NJ];
#endif

byte crashes; byte cancels;

/* ---- ghosts: what really happened, for the properties ---- */
bool gsettled[NJ];      /* the latest claim's run had a settling write accepted */
bool gstart[NJ];        /* the latest claim's run has started its handler */
bool gasked[NJ];        /* ... was counted started because its worker asked
                           (claim start_now, or a start mark) */
byte gterm[NJ];         /* the terminal state the job reached (0: none yet) */
/* the properties' names, as pan reports a violation */
bool stale_write_accepted;
bool attempt_charged_to_a_run_that_never_started;
bool job_lost_or_terminal_state_changed;
bool two_running_holders_of_a_job;
bool two_running_holders_of_the_limit;

inline record_end(j) {
  if
  :: TERMINAL(st[j]) && gterm[j] == 0 -> gterm[j] = st[j]
  :: else -> skip
  fi
}

/* lua/_lib.lua requeue (a retry delay only changes when it is claimable) */
inline requeue(j) {
  started[j] = 0; st[j] = QUEUED; inready[j] = 1
}

/* lua/_lib.lua finish / bury */
inline finish(j, s) {
  st[j] = s; cancel[j] = 0; started[j] = 0
}

/* a settling write of run (j, t) was accepted: fencing. Only the run of
   the job's latest claim settles it, and at most once */
inline accepted(j, t) {
  stale_write_accepted = !(t == tok[j] && !gsettled[j]);   /* tok: set by claims only */
  assert(!stale_write_accepted);
  gsettled[j] = 1
}

/* reap.lua charges an expired started run as an attempt */
inline charged(j) {
#ifdef STRICT_CHARGE
  attempt_charged_to_a_run_that_never_started = !gstart[j];
#else
  attempt_charged_to_a_run_that_never_started = !(gstart[j] || gasked[j]);
#endif
  assert(!attempt_charged_to_a_run_that_never_started)
}

/* ---- the run table's phase changes (runs.py) ---- */
#ifdef LIMIT
inline give_slot(i) {   /* the executor gives its slots back once the handler returned */
  if
  :: hs[i] -> hs[i] = 0; xq[i] = 1; xq_tok[i] = wt[i]
  :: else -> skip
  fi
}
#else
inline give_slot(i) { skip }
#endif

/* lose: no more renewals or writes; a running handler is stopped */
inline lose(i) {
  give_slot(i); ph[i] = NONE; wsk[i] = 0; wdl[i] = 0; wsdl[i] = 0; wt[i] = 0;
  sq[i] = 0
}

/* the handler returned (or a run that must not start): send its settling write */
inline settle(i, o) {   /* (a run settling needs no start mark: its write counts it) */
  give_slot(i); ph[i] = FIN; tq[i] = 1; tq_out[i] = o; sq[i] = 0;
  wdl[i] = 0; wsk[i] = 0; wsdl[i] = 0   /* no longer read: the write's answer decides */
}

/* stop: a running handler returns at once; a claimed run never starts
   (a canceled one ends canceled at once; runs.py stop, executor.py _not_started) */
inline stop(i, why) {
  if
  :: ph[i] == RUN && why == S_CANCEL -> settle(i, O_CANCEL)
  :: ph[i] == RUN && why == S_SLOT -> settle(i, O_INFRA)
  :: ph[i] == CL && why == S_CANCEL -> settle(i, O_CANCEL)   /* executor.py _not_started */
  :: else -> skip
  fi
}

/* the worker's own-clock rule (runs.py lapses), applied as the clock moves:
   a lease that may have lapsed loses its run; a running run whose slot may
   have lapsed is stopped */
inline lapse(i) {
  if
  :: (ph[i] == CL || ph[i] == RUN) && wdl[i] == 0 -> lose(i)
  :: else -> skip
  fi;
#ifndef BUG_SLOT_NO_STOP
  if
  :: ph[i] == RUN && hs[i] && wsdl[i] == 0 -> stop(i, S_SLOT)
  :: else -> skip
  fi
#endif
}

/* ---- the environment: the clock, the reapers, the operator ---- */
inline dec(x) {
  if :: x > 0 -> x-- :: else -> skip fi
}

inline tick() {   /* one tick of the server clock: every instant comes one closer */
  dec(exp[0]); dec(exp[1]);
  dec(ck_exp[0]); dec(ck_exp[1]); dec(cr_dl[0]); dec(cr_dl[1]);
  for (i : 0 .. NW * NJ - 1) {
    dec(wdl[i]); dec(wsdl[i]);
#ifdef LIMIT
    /* a lapsed holder is pruned at once (limiter_acquire.lua prunes it before
       counting; limiter_renew.lua could revive it first, but only after its
       worker's own deadline, never later than the holder's, stopped its run) */
    dec(lh_exp[i]);
    if :: lh[i] && lh_exp[i] == 0 -> lh[i] = 0; lh_tok[i] = 0 :: else -> skip fi;
#endif
    if :: ck_exp[i / NJ] == 0 -> ck_id[i / NJ] = 0; ck_tok[i] = 0 :: else -> skip fi
  };
  i = 0
}
#define EXPIRED(j) (inl[j] && exp[j] == 0)

inline reap(j) {   /* reap.lua for one expired lease */
  if
  :: EXPIRED(j) ->
     inl[j] = 0; exp[j] = 0;
     if
     :: st[j] != LEASED -> skip
     :: else ->
        if
        :: cancel[j] -> finish(j, CANCELED)
        :: !cancel[j] && started[j] ->
           charged(j);
           if
           :: att[j] >= MAXATT -> finish(j, DEAD)
           :: else -> requeue(j)
           fi
        :: !cancel[j] && !started[j] ->
           inf[j]++;
           if
           :: inf[j] >= MAXINF -> finish(j, DEAD)
           :: else -> requeue(j)
           fi
        fi
     fi;
     record_end(j)
  :: else -> skip
  fi
}

inline cancel_job(j) {   /* cancel.lua, token 0 */
  cancels++;
  if
  :: st[j] == QUEUED || st[j] == LEASED && !started[j] ->
     inready[j] = 0; inl[j] = 0; exp[j] = 0; finish(j, CANCELED)
  :: st[j] == LEASED && started[j] -> cancel[j] = 1
  :: else -> skip
  fi;
  record_end(j)
}

active proctype env() {
  byte i;
  end:
  do
  :: d_step { tick(); lapse(0); lapse(1); lapse(2); lapse(3) }
  :: d_step { EXPIRED(0) || EXPIRED(1) -> reap(0); reap(1) }   /* one batch */
  :: d_step { cancels < MAXCANCEL && !TERMINAL(st[0]) -> cancel_job(0) }
  od
}

/* ---- claim.lua ---- */
inline lease_one(w, j, cnt, sn) {
  if
  :: inready[j] && n < cnt ->
     n++; inready[j] = 0; st[j] = LEASED;
     if   /* start_now: the first sn jobs are counted started by the claim */
     :: n <= sn -> started[j] = 1; att[j]++
     :: else -> started[j] = 0
     fi;
     ctr++;
#ifdef BUG_CLAIM_KEEPS_TOKEN
     if :: tok[j] == 0 -> tok[j] = ctr :: else -> skip fi;
#else
     if :: ctr > tok[j] -> tok[j] = ctr :: else -> tok[j]++ fi;
#endif
     inl[j] = 1; exp[j] = LEASE;
     cr_tok[I(w, j)] = tok[j]; cr_st[I(w, j)] = started[j];
     gsettled[j] = 0; gstart[j] = 0; gasked[j] = started[j]
  :: else -> skip
  fi
}

inline retry_one(w, j) {
  if
  :: ck_tok[I(w, j)] != 0 && st[j] == LEASED && tok[j] == ck_tok[I(w, j)] ->
     cr_tok[I(w, j)] = tok[j]; cr_st[I(w, j)] = started[j];
#ifndef BUG_RETRY_OLD_LEASE
     exp[j] = LEASE   /* the retry renews the leases it returns */
#endif
  :: else -> skip
  fi
}

inline clear_reply(w) {
  cr_tok[I(w, 0)] = 0; cr_st[I(w, 0)] = 0; cr_tok[I(w, 1)] = 0; cr_st[I(w, 1)] = 0; cr_dl[w] = 0
}

/* one claim call: cnt jobs at most, sn of them started, ZPOPMIN order from `first` */
inline claim(w, cnt, sn, first) {
  clear_reply(w);
  if
  :: ck_id[w] == cq_id[w] && ck_exp[w] > 0 ->   /* 0. a retried call */
     retry_one(w, 0); retry_one(w, 1)
  :: else ->                                       /* 2. lease */
     n = 0; lease_one(w, first, cnt, sn); lease_one(w, 1 - first, cnt, sn);
     if
     :: n > 0 ->
        ck_id[w] = cq_id[w]; ck_exp[w] = LEASE;
        ck_tok[I(w, 0)] = cr_tok[I(w, 0)]; ck_tok[I(w, 1)] = cr_tok[I(w, 1)]
     :: else -> skip
     fi;
     n = 0
  fi;
  cr_dl[w] = LEASE   /* sent now: the worker counts its leases from here */
}

inline claimed(w, j) {   /* runs.py claimed: the lease is confirmed at the send */
  if
  :: cr_tok[I(w, j)] != 0 ->
     ph[I(w, j)] = CL; wt[I(w, j)] = cr_tok[I(w, j)]; wsk[I(w, j)] = cr_st[I(w, j)];
#ifdef BUG_DEADLINE_AT_REPLY
     wdl[I(w, j)] = LEASE
#else
     wdl[I(w, j)] = cr_dl[w]
#endif
  :: else -> skip
  fi
}

/* a new claim (the worker is idle) or the same claim sent again (cq == 1) */
#define NEW_CLAIM(w) (cq[w] == 0 && ncl[w] < MAXCL && QUIET(I(w, 0)) && QUIET(I(w, 1)))
inline new_claim(w) { ncl[w]++; cq_id[w] = ncl[w] }

/* ---- renew.lua, and the heartbeater's reading of its answer ---- */
inline renew_one(w, j) {
  i = I(w, j); rr[i] = 0;
  if
  :: ph[i] != NONE && st[j] == LEASED && tok[j] == wt[i] ->
     exp[j] = LEASE;
     if :: cancel[j] -> rr[i] = R_CANCEL :: else -> rr[i] = R_OK fi
  :: ph[i] != NONE && !(st[j] == LEASED && tok[j] == wt[i]) -> rr[i] = R_LOST
  :: else -> skip
  fi;
  i = 0
}

inline renewed(w, j) {   /* heartbeater.py _renew_leases */
  i = I(w, j);
  if
  :: rr[i] == R_LOST && ph[i] != FIN -> lose(i)
  :: (rr[i] == R_OK || rr[i] == R_CANCEL) && ph[i] != FIN ->
     wdl[i] = LEASE;
     if :: rr[i] == R_CANCEL -> stop(i, S_CANCEL) :: else -> skip fi
  :: else -> skip
  fi;
  rr[i] = 0; i = 0
}

#ifdef LIMIT
inline lrenew_one(w, j) {   /* limiter_renew.lua: a holder still in the ZSET is renewed */
  i = I(w, j); lr[i] = 0;
  if
  :: hs[i] && lh[i] && lh_tok[i] == wt[i] -> lh_exp[i] = LLEASE; lr[i] = 1
  :: else -> skip
  fi;
  i = 0
}

inline lrenewed(w, j) {   /* heartbeater.py _renew_slots */
  i = I(w, j);
  if
  :: hs[i] && lr[i] ->
     wsdl[i] = LLEASE
  :: hs[i] && !lr[i] -> stop(i, S_SLOT)
  :: else -> skip
  fi;
  lr[i] = 0; i = 0
}
#endif

/* SIGKILL and a restart: the process's runs are gone; what it sent may still run */
inline crash_run(i) {
  sq[i] = 0; tq[i] = 0; tq_out[i] = 0;
#ifdef LIMIT
  hs[i] = 0;   /* its slots lapse in the limiter */
#endif
  ph[i] = NONE; wt[i] = 0; wdl[i] = 0; wsk[i] = 0; wsdl[i] = 0
}

/* no run held, and no request of an earlier run on its way (the model
   reuses the run slot I(w, j) for the worker's next run of job j) */
#ifdef LIMIT
#define QUIET(i) (ph[i] == NONE && tq[i] == 0 && xq[i] == 0)
#else
#define QUIET(i) (ph[i] == NONE && tq[i] == 0)
#endif
#define HOLDS(w) (ph[I(w, 0)] != NONE || ph[I(w, 1)] != NONE)

/* ---- a worker: claimer, heartbeater, crash ---- */
proctype worker(byte w) {
  byte i, n;
  end:
  do
  /* claimer.py: an idle worker claims up to its free slots (cnt), for idle
     executors (sn started at once) or ahead (none started); a claim whose
     reply was lost is sent again with the same claim id */
  :: d_step { NEW_CLAIM(w) -> new_claim(w); claim(w, 1, 0, 0); cq[w] = 2 }
  :: d_step { NEW_CLAIM(w) -> new_claim(w); claim(w, 1, 0, 0); cq[w] = 1; clear_reply(w) }
  :: d_step { NEW_CLAIM(w) && w == BATCHW -> new_claim(w); claim(w, 2, 0, 0); cq[w] = 2 }
  :: d_step { NEW_CLAIM(w) && w == BATCHW -> new_claim(w); claim(w, 2, 0, 0); cq[w] = 1; clear_reply(w) }
#ifndef LIMIT   /* runs that may wait for a limiter slot are never started at claim */
  :: d_step { NEW_CLAIM(w) -> new_claim(w); claim(w, 1, 1, 0); cq[w] = 2 }
  :: d_step { NEW_CLAIM(w) -> new_claim(w); claim(w, 1, 1, 0); cq[w] = 1; clear_reply(w) }
  :: d_step { NEW_CLAIM(w) && w == BATCHW -> new_claim(w); claim(w, 2, 1, 0); cq[w] = 2 }
  :: d_step { NEW_CLAIM(w) && w == BATCHW -> new_claim(w); claim(w, 2, 2, 0); cq[w] = 2 }
  :: d_step { NEW_CLAIM(w) && w == BATCHW -> new_claim(w); claim(w, 2, 2, 0); cq[w] = 1; clear_reply(w) }
#endif
  :: d_step { cq[w] == 1 -> claim(w, 2, 0, 0); cq[w] = 2 }   /* the retry: same id */
  :: d_step { cq[w] == 1 -> claim(w, 2, 0, 0); clear_reply(w) }   /* lost again */
  :: d_step {   /* (its claim key is never read again: the next claim has a new id) */
       cq[w] == 2 -> claimed(w, 0); claimed(w, 1); cq[w] = 0; clear_reply(w);
       ck_id[w] = 0; ck_exp[w] = 0; ck_tok[I(w, 0)] = 0; ck_tok[I(w, 1)] = 0
     }
  /* heartbeater.py: renew every lease it holds (claimed, running, settling);
     the answer is read, or lost (then only the server's lease moved) */
  :: d_step { HOLDS(w) -> renew_one(w, 0); renew_one(w, 1); renewed(w, 0); renewed(w, 1) }
#ifndef LIMIT   /* (a lost answer only makes the worker stop sooner: left out of the limit check) */
  :: d_step { HOLDS(w) -> renew_one(w, 0); renew_one(w, 1); rr[I(w, 0)] = 0; rr[I(w, 1)] = 0 }
#endif
#ifdef LIMIT
  :: d_step {
       hs[I(w, 0)] || hs[I(w, 1)] ->
       lrenew_one(w, 0); lrenew_one(w, 1); lrenewed(w, 0); lrenewed(w, 1)
     }
#endif
  :: d_step {
       crashes < MAXCRASH && w == 0 -> crashes++;
       cq[w] = 0; clear_reply(w);   /* a new process: its claim ids never match the old */
       ck_id[w] = 0; ck_exp[w] = 0; ck_tok[I(w, 0)] = 0; ck_tok[I(w, 1)] = 0;
       crash_run(I(w, 0)); crash_run(I(w, 1))
     }
  od
}

/* ---- one run slot of a worker: executor, starter, acker, limits ---- */
inline settle_write(j, i) {   /* ack.lua, fail.lua, release.lua */
  if
  :: st[j] == LEASED && (tok[j] == wt[i]
#ifdef BUG_ACK_NO_TOKEN
                         || tq_out[i] == O_ACK || tq_out[i] == O_CANCEL
#endif
     ) ->
     accepted(j, wt[i]); inl[j] = 0; exp[j] = 0;
     if
     :: tq_out[i] == O_ACK || tq_out[i] == O_CANCEL ->         /* ack.lua */
        if :: !started[j] -> att[j]++ :: else -> skip fi;
        if :: tq_out[i] == O_ACK -> finish(j, SUCCEEDED)
           :: else -> finish(j, CANCELED) fi
     :: tq_out[i] == O_WORK ->                                 /* fail.lua work */
        if :: !started[j] -> att[j]++ :: else -> skip fi;
        if
        :: att[j] >= MAXATT -> finish(j, DEAD)
        :: att[j] < MAXATT && cancel[j] -> finish(j, CANCELED)
        :: else -> requeue(j)
        fi
     :: tq_out[i] == O_INFRA ->                                /* fail.lua infra */
        inf[j]++;
        if :: started[j] && att[j] > 0 -> att[j]-- :: else -> skip fi;
        if
        :: inf[j] >= MAXINF -> finish(j, DEAD)
        :: inf[j] < MAXINF && cancel[j] -> finish(j, CANCELED)
        :: else -> requeue(j)
        fi
     :: tq_out[i] == O_RELEASE ->                              /* release.lua */
        if :: started[j] && att[j] > 0 -> att[j]-- :: else -> skip fi;
        if
        :: cancel[j] -> finish(j, CANCELED)
        :: else -> requeue(j)
        fi
     fi;
     record_end(j)
  :: else -> skip                                              /* refused */
  fi
}

inline start_mark(j, i) {   /* start.lua */
  if
  :: st[j] == LEASED && tok[j] == wt[i] && inl[j] ->
     if
     :: !started[j] ->
        started[j] = 1; att[j]++;
        if :: wt[i] == tok[j] -> gasked[j] = 1 :: else -> skip fi
     :: else -> skip
     fi;
     if :: cancel[j] -> n = R_CANCEL :: else -> n = R_OK fi
  :: else -> n = R_LOST
  fi
}

#ifdef LIMIT
#define SLOT_OK(i) (hs[i] && wsdl[i] >= MINSH)
#else
#define SLOT_OK(i) true
#endif

proctype runner(byte w; byte j) {
  byte i = I(w, j);
  byte n, k;
  end:
  do
  /* executor.py _start (runs.py start): only while lease and slot stay valid */
  :: d_step {
       ph[i] == CL && wdl[i] >= MINSH && SLOT_OK(i) && wsk[i] ->
       ph[i] = RUN; if :: wt[i] == tok[j] -> gstart[j] = 1 :: else -> skip fi
     }
  :: d_step {   /* started at once, marked in the background (starter.py mark) */
       ph[i] == CL && wdl[i] >= MINSH && SLOT_OK(i) && !wsk[i] && sq[i] == 0 ->
       ph[i] = RUN; if :: wt[i] == tok[j] -> gstart[j] = 1 :: else -> skip fi;
       sq[i] = 1
     }
#ifdef CONFIRM
  :: d_step {   /* starter.confirm: asks Redis before it starts */
       ph[i] == CL && !wsk[i] && sq[i] == 0 -> sq[i] = 1
     }
#endif
#ifdef LIMIT
  :: d_step { ph[i] == CL && hs[i] && wsdl[i] < MINSH -> settle(i, O_RELEASE) }   /* not started */
#endif
  :: d_step { ph[i] == RUN -> settle(i, O_ACK) }    /* the handler returned */
  :: d_step { ph[i] == RUN -> settle(i, O_WORK) }   /* ... or raised */
  /* start.lua, and its reply (starter.py _apply); a lost reply: sent again */
  :: d_step {
       sq[i] == 1 && (ph[i] == CL || ph[i] == RUN) -> start_mark(j, i); sq[i] = 0;
       if
       :: n == R_LOST -> lose(i)
       :: n == R_OK -> wsk[i] = 1
       :: n == R_CANCEL -> wsk[i] = 1; stop(i, S_CANCEL)
       fi;
       n = 0
     }
  :: d_step { sq[i] == 1 && (ph[i] == CL || ph[i] == RUN) -> start_mark(j, i); n = 0 }
  /* the settling write (acker.py, executor.py _fail / _release) and its
     reply: settled (accepted) or lost (refused); a lost reply: sent again */
  :: d_step { tq[i] == 1 -> settle_write(j, i); tq[i] = 0; tq_out[i] = 0; lose(i) }
  :: d_step { tq[i] == 1 -> settle_write(j, i) }
#ifdef LIMIT
  /* limits.py acquire, limiter_acquire.lua (max_concurrent = 1, mode take):
     the slot, valid from the send; or none, and on_conflict=enqueue releases
     the job. Limiter replies are not lost in the model: a lost one only
     leaves a slot held longer at the server (an acquire's or a release's),
     or stops a run sooner (a renewal's), never the reverse; a slot lapses
     when its worker stalls (does not renew) */
  :: d_step {
       ph[i] == CL && !hs[i] ->
       n = 0;
       for (k : 0 .. NW * NJ - 1) {
         if :: lh[k] && lh_exp[k] == 0 -> lh[k] = 0; lh_tok[k] = 0; lh_exp[k] = 0
            :: else -> skip fi;
         if :: lh[k] -> n++ :: else -> skip fi
       };
       k = 0;
       if
       :: lh[i] && lh_tok[i] == wt[i] || n < 1 ->
          lh[i] = 1; lh_tok[i] = wt[i]; lh_exp[i] = LLEASE;
          hs[i] = 1; wsdl[i] = LLEASE
       :: else -> settle(i, O_RELEASE)
       fi;
       n = 0
     }
  /* limiter_release.lua (fire and forget) */
  :: d_step {
       xq[i] != 0 ->
       if :: lh[i] && lh_tok[i] == xq_tok[i] -> lh[i] = 0; lh_tok[i] = 0; lh_exp[i] = 0
          :: else -> skip fi;
       xq[i] = 0; xq_tok[i] = 0
     }
#endif
  od
}

init {
  atomic {
    run worker(0); run worker(1);
    run runner(0, 0); run runner(0, 1); run runner(1, 0); run runner(1, 1)
  }
}

/* ---- the properties, checked in every reachable state ---- */
#define LIVE_IN_REDIS(j) (st[j] == QUEUED && inready[j] && !inl[j] || \
                          st[j] == LEASED && inl[j] && !inready[j] || \
                          TERMINAL(st[j]) && !inready[j] && !inl[j])
#define FINAL(j) (gterm[j] == 0 || gterm[j] == st[j])
#define RUNNING(w, j) (ph[I(w, j)] == RUN)

/* nothing lost: each job queued, leased (its lease in the leases ZSET,
   where a reaper finds it) or terminal; a terminal state is final */
#define NOTHING_LOST (LIVE_IN_REDIS(0) && LIVE_IN_REDIS(1) && FINAL(0) && FINAL(1))
/* one running holder per job */
#define ONE_HOLDER (!(RUNNING(0, 0) && RUNNING(1, 0)) && !(RUNNING(0, 1) && RUNNING(1, 1)))
/* max_concurrent = 1: never two running holders of the limit */
#define ONE_IN_LIMIT (RUNNING(0, 0) + RUNNING(0, 1) + RUNNING(1, 0) + RUNNING(1, 1) <= 1)

active proctype monitor() {
  end:
  atomic {
    !(NOTHING_LOST && ONE_HOLDER
#ifdef LIMIT
      && ONE_IN_LIMIT
#endif
    ) ->
    job_lost_or_terminal_state_changed = !NOTHING_LOST;
    assert(!job_lost_or_terminal_state_changed);
    two_running_holders_of_a_job = !ONE_HOLDER;
    assert(!two_running_holders_of_a_job);
    two_running_holders_of_the_limit = 1;
    assert(!two_running_holders_of_the_limit)
  }
}
