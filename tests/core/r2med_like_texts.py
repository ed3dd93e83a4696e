"""Texts of the kinds R2MED's tasks hold, for testing the seed's rules on the seed's own kind of text.

- ``R2MED_DEMO_*``: R2MED's own text, the two corpus lines and the query of ``dataset/Biology-demo``
  in github.com/R2MED/R2MED at 62b7074 (MIT licence), copied unchanged (a leading space, a
  newline, ``5 ft 5 in``, ``Einhornhöhle``, a document id that is a path);
- ``CLINICAL_CASE``: a long clinical case written here in the style of PMC-Patients / IIYi-Clinical
  (more than 512 word pieces: truncation is exercised), with lab values, units and ranges;
- ``PMC_PASSAGE``: a PMC passage with the markup PMC's text dumps keep (``<sup>``, ``&lt;``,
  citation brackets, a table row, a LaTeX-like formula, an URL);
- ``NON_ASCII``: Greek letters, micro signs, degrees, superscripts, a narrow no-break space
  (U+202F) inside and at the edges of a text, accented names, CJK (IIYi's cases are translated
  from Chinese), letters outside the Basic Multilingual Plane (mathematical italic, Deseret,
  Gothic) and emoji.

None of these was written by a tokenizer's author: they are here to exercise tokenizers and
analysers on what R2MED feeds them.
"""

R2MED_DEMO_DOCS = [
    " pelvises; and proportionally shorter forearms and forelegs.\nBased on 45 Neanderthal long bones from 14 men and 7 women, the average height was "
    "164 to 168 cm (5 ft 5 in to 5 ft 6 in) for males and 152 to 156 cm (5 ft 0 in to 5 ft 1 in) for females. For comparison, the average height of 20 "
    "males and 10 females Upper Palaeolithic humans is, respectively, 176.2 cm (5 ft 9.4 in) and 162.9",
    " Gorham's Cave, Gibraltar, were discovered, dated to older than 39,000 years ago, which the discoverers have interpreted as Neanderthal abstract "
    "art. The scratches could have also been produced by a bear. In 2021, an Irish elk phalanx with five engraved offset chevrons stacked above each "
    "other was discovered at the entrance to the Einhornhöhle cave in Germany, dating to about 51,000 years ago.\nIn 2018, some red-painted dots, "
    "disks, lines and hand stencils on the cave walls of the Spanish La Pasie",
]
R2MED_DEMO_QUERY = (
    "Claim in article about why insects are attracted to light\nIn this article they are addressing the reason insects are attracted to light when "
    "they say\nHeat radiation as an attractive component is refuted by the effect of LED lighting, which supplies negligible infrared radiation yet "
    "still entraps vast numbers of insects.\nI don't see why attraction to LEDs shows they're not seeking heat. Could they for example be "
    'evolutionarily programmed to associate light with heat? So that even though they don\'t encounter heat near/on the LEDs they still "expect" to?'
)

CLINICAL_CASE = " ".join(
    [
        "A 67-year-old man with a 12-year history of type 2 diabetes mellitus (HbA1c 8.4%) and hypertension (158/96 mmHg) presented to the",
        "emergency department with 3 days of fever (39.2 °C), productive cough and right-sided pleuritic chest pain. He had been treated with",
        "amoxicillin 500 mg t.i.d. for 5 days by his general practitioner without improvement. On admission, heart rate was 112 beats/min,",
        "respiratory rate 28/min and SpO2 89% on room air. Laboratory tests showed a white-cell count of 18.7 × 10^9/L (neutrophils 91%),",
        "C-reactive protein 287 mg/L, procalcitonin 12.4 ng/mL, creatinine 168 μmol/L (baseline 94 μmol/L), sodium 131 mmol/L and lactate",
        "3.9 mmol/L. Chest radiography revealed a right lower-lobe consolidation with a moderate parapneumonic effusion; CT of the thorax",
        "(contrast-enhanced, 1.25-mm slices) confirmed a loculated effusion of ~420 mL with pleural enhancement ('split pleura' sign).",
        "Diagnostic thoracentesis yielded turbid fluid: pH 7.02, glucose 1.1 mmol/L, LDH 2,340 U/L, protein 48 g/L; Gram stain showed",
        "Gram-positive cocci in chains, and culture grew Streptococcus intermedius (S. anginosus group), susceptible to penicillin",
        "(MIC ≤0.06 µg/mL) and ceftriaxone. Blood cultures (2 of 2 sets) grew the same organism after 19 h. A 14-Fr chest drain was",
        "inserted under ultrasound guidance and intrapleural tissue plasminogen activator 10 mg with DNase 5 mg b.i.d. was given for 3 days",
        "(MIST-2 regimen), draining 1,150 mL in total. Intravenous ceftriaxone 2 g q24h and metronidazole 500 mg q8h were started. On day 4",
        "the patient developed new-onset atrial fibrillation (ventricular rate 148/min) and was rate-controlled with bisoprolol 2.5 mg;",
        "transthoracic echocardiography showed a left-ventricular ejection fraction of 55-60% and no vegetation. Repeat CT on day 7 showed",
        "near-complete resolution of the collection, and the drain was removed. He was switched to oral amoxicillin 1 g t.i.d. on day 10",
        "to complete 4 weeks of therapy. At follow-up after 6 weeks, he was asymptomatic, CRP was 4 mg/L and the chest radiograph showed",
        "only minor residual pleural thickening. Dental examination revealed severe periodontitis, considered the likely source of the",
        "S. intermedius bacteraemia; 3 teeth were extracted. What is the most likely diagnosis, and which further investigations and",
        "treatments would you recommend to prevent recurrence? Discuss the role of intrapleural fibrinolysis versus video-assisted",
        "thoracoscopic surgery (VATS) in complicated parapneumonic effusion and empyema, with reference to the RAPID score (renal,",
        "age, purulence, infection source, dietary factors: albumin <27 g/L) and to the 2023 BTS guideline on pleural disease.",
    ]
    * 2
)

PMC_PASSAGE = (
    "Serum 25(OH)D concentrations were &lt;20 ng/mL in 41.3% of patients<sup>[12,13]</sup>, and the odds ratio for severe disease was "
    "2.14 (95% CI 1.37&#x2013;3.35; <i>p</i>&nbsp;=&nbsp;0.001) [Table 2]. <table><tr><td>IL-6 (pg/mL)</td><td>38.2 ± 11.4</td></tr></table> "
    "The model was log(OR) = β<sub>0</sub> + β<sub>1</sub>x, fitted in R 4.2.1 (https://www.r-project.org/); see Fig. 3B and doi:10.1186/s12879-021-06536-3."
)

NON_ASCII = [
    "Sjögren's syndrome and Ménière's disease in naïve patients—a café-au-lait case",
    "IL-1β, TNF-α and IFN-γ rose to 5 µg/L (μg/L); T 38.5 °C; SpO₂ 92%; 10⁹/L; ½ tablet; ≥3 mm",
    "\u202fnarrow\u202fno-break\u202fspaces\u202f",  # U+202F at both edges and between the words
    "患者男性，67岁，发热伴咳嗽3天 — translated IIYi case: fever and cough for 3 days",
    "mathematical 𝛼-helix and 𝑥² (U+1D6FC, U+1D465), Deseret 𐐷𐐸𐐹, Gothic 𐌰𐌱 and emoji 🦠🧬 in a case note",
    "Wörter mit 𐐀𐐁 capital Deseret, caféteria𝐀𝐁running, stemming𝛼ations",
]

ALL = [*R2MED_DEMO_DOCS, R2MED_DEMO_QUERY, CLINICAL_CASE, PMC_PASSAGE, *NON_ASCII]
