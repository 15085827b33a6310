// The side view of the machine in the boom plane: one small SVG. The server sends a frame only
// when the machine, the terrain under it or the target changed, through the method draw():
// only this component is redrawn (an element update would re-render NiceGUI's whole page).
// Units are metres: r (horizontal distance from the swing axis) to the right, z up.
// Props: view [r0, r1, z0, z1]; styles {part: [colour, width]}; the frame at mount time: lines
// {part: [r, z, r, z, ...]}, terrain [r, z, r, z, ...] (the profile under the boom), target
// [r, z] or []; paused: the tab is hidden, the server sends nothing until it is shown again.
export default {
  template: `
    <svg :viewBox="viewBox" preserveAspectRatio="xMidYMid meet"
         :data-frames="frames" :data-paused="paused ? 'true' : 'false'">
      <g stroke="#d8d8d8" stroke-width="0.02">
        <line v-for="r in rTicks" :key="'r' + r" :x1="r" :x2="r" :y1="-view[3]" :y2="-view[2]"/>
        <line v-for="z in zTicks" :key="'z' + z" :x1="view[0]" :x2="view[1]" :y1="-z" :y2="-z"/>
      </g>
      <g font-size="0.32" fill="#555">
        <text v-for="r in rLabels" :key="'rl' + r" :x="r" :y="-view[2] + 0.4"
              text-anchor="middle">{{ r }}</text>
        <text v-for="z in zLabels" :key="'zl' + z" :x="view[0] - 0.12" :y="-z + 0.11"
              text-anchor="end">{{ z }}</text>
        <text :x="view[1]" :y="-view[2] + 0.75" text-anchor="end">r [m]</text>
        <text :x="view[0] - 0.12" :y="-view[3] - 0.15" text-anchor="end">z [m]</text>
      </g>
      <polygon v-if="terrainPoints" class="dash-side-terrain" :points="terrainPoints"
               fill="#c8a882" stroke="#8b6b47" stroke-width="0.04"/>
      <polyline v-for="p in parts" :key="p.name" :class="'dash-side-' + p.name"
                :points="p.points" fill="none" :stroke="p.colour" :stroke-width="p.width"
                stroke-linejoin="round" stroke-linecap="round"/>
      <circle v-if="cur.target && cur.target.length == 2" class="dash-side-target"
              :cx="cur.target[0]" :cy="-cur.target[1]" r="0.13" fill="#d02020"/>
    </svg>`,
  props: {
    view: Array,
    styles: Object,
    lines: Object,
    terrain: Array,
    target: Array,
    paused: Boolean,
  },
  data() {
    // frames: machine poses drawn (the browser test reads data-frames)
    return { frames: 0, cur: { lines: this.lines, terrain: this.terrain, target: this.target } };
  },
  methods: {
    // a frame from the server; null: unchanged
    draw(lines, terrain, target) {
      if (lines) {
        this.cur.lines = lines;
        this.frames += 1;
      }
      if (terrain) this.cur.terrain = terrain;
      if (target) this.cur.target = target;
    },
  },
  computed: {
    viewBox() {
      const [r0, r1, z0, z1] = this.view;
      return `${r0 - 0.9} ${-z1 - 0.5} ${r1 - r0 + 1.0} ${z1 - z0 + 1.4}`;
    },
    rTicks() {
      return range(Math.ceil(this.view[0]), this.view[1], 1);
    },
    zTicks() {
      return range(Math.ceil(this.view[2]), this.view[3], 1);
    },
    rLabels() {
      return range(Math.ceil(this.view[0] / 2) * 2, this.view[1], 2);
    },
    zLabels() {
      return range(Math.ceil(this.view[2] / 2) * 2, this.view[3], 2);
    },
    parts() {
      const out = [];
      for (const [name, style] of Object.entries(this.styles || {})) {
        const flat = (this.cur.lines || {})[name];
        if (flat && flat.length >= 4) {
          out.push({ name, colour: style[0], width: style[1], points: svgPoints(flat) });
        }
      }
      return out;
    },
    terrainPoints() {
      const t = this.cur.terrain;
      if (!t || t.length < 4) return "";
      const bottom = -this.view[2];
      return `${t[0]},${bottom} ${svgPoints(t)} ${t[t.length - 2]},${bottom}`;
    },
  },
};

function range(start, stop, step) {
  const out = [];
  for (let v = start; v <= stop + 1e-9; v += step) out.push(Math.round(v * 1000) / 1000);
  return out;
}

function svgPoints(flat) {
  const parts = [];
  for (let i = 0; i + 1 < flat.length; i += 2) parts.push(`${flat[i]},${-flat[i + 1]}`);
  return parts.join(" ");
}
