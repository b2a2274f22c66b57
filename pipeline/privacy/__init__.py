"""Every privacy parameter and certificate, and the noise: a session's plan (session_plan: one function
per mode), the parameter classes of A_SubSamp, A_AgPrivCl and A_UnvPrivCl, the accountants, the noise
sources, the parameter limits and the papers' sample-size formulas (pcqr plan)."""
